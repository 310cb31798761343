// One binary for the whole single-node Kubernetes that setup builds (scripts/lib/kube.sh):
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kubectl, picked
// by the name it runs under (setup links each name to it), or by its first argument
// (`kube kubelet --config ...`). Linking the six programs once costs a fraction of six links
// on the two cores our machines have, and their shared packages are compiled once. Each
// branch is the body of that program's own main package at the pinned release.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	_ "time/tzdata" // for CronJob time zones, as kube-apiserver's and kube-controller-manager's mains

	"go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/client-go/plugin/pkg/client/auth" // kubectl's client auth plugins
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"          // the JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go's metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

var programs = []string{
	"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl",
}

func known(name string) bool {
	for _, program := range programs {
		if name == program {
			return true
		}
	}
	return false
}

func main() {
	name := filepath.Base(os.Args[0])
	if !known(name) && len(os.Args) > 1 && known(os.Args[1]) {
		// `kube PROGRAM ARGS...`: the program sees itself as argv[0], as under its own name.
		os.Args = os.Args[1:]
		name = os.Args[0]
	}
	switch name {
	case "etcd":
		etcdmain.Main(os.Args)
	case "kube-apiserver":
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	case "kube-controller-manager":
		os.Exit(cli.Run(controllermanager.NewControllerManagerCommand()))
	case "kube-scheduler":
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	case "kubelet":
		os.Exit(cli.Run(kubelet.NewKubeletCommand(context.Background())))
	case "kubectl":
		logs.GlogSetter(kubectl.GetLogVerbosity(os.Args)) // nolint:errcheck
		if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
	default:
		fmt.Fprintf(os.Stderr, "run me as one of %s (a link of that name), or give it first\n",
			strings.Join(programs, ", "))
		os.Exit(2)
	}
}
