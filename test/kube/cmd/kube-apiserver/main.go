// Command kube-apiserver is the Kubernetes API server built from its own module
// (k8s.io/kubernetes cmd/kube-apiserver/app) for the tests in test/kube only;
// nothing of it ships. See docs/kubernetes.md.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
