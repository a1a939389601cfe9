// Command helm is Helm v4 built from helm.sh/helm/v4 for the tests in test/kube
// (helm lint, helm template of deploy/helm/supervaizer-sidecar); nothing of it ships.
package main

import (
	"errors"
	"os"

	helmcmd "helm.sh/helm/v4/pkg/cmd"
	"helm.sh/helm/v4/pkg/kube"
)

func main() {
	kube.ManagedFieldsManager = "helm"
	cmd, err := helmcmd.NewRootCmd(os.Stdout, os.Args[1:], helmcmd.SetupLogging)
	if err != nil {
		os.Stderr.WriteString("helm: " + err.Error() + "\n")
		os.Exit(1)
	}
	if err := cmd.Execute(); err != nil {
		if cerr, ok := errors.AsType[helmcmd.CommandError](err); ok {
			os.Exit(cerr.ExitCode)
		}
		os.Exit(1)
	}
}
