// Command kubectl is kubectl built from k8s.io/kubectl for the tests in test/kube
// (apply --server-side --dry-run=server -k, as a platform team runs it); nothing of it ships.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
