// The pod sandbox's process (the "pause" container) for the test cluster's kubelet: it holds
// the pod's namespaces, reaps the zombies of a pod that shares its process namespace, and
// exits on SIGTERM or SIGINT. registry.k8s.io's pause image cannot be pulled from our
// machines, so setup builds this one and the cluster imports it as containerd's
// sandbox_image (tests/support/cluster.py).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
