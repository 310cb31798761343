"""The cluster: imagekit's pods on a Kubernetes cluster, and what their kubelets report.

``connection`` finds the cluster as kubectl does (kubeconfig, KUBECONFIG, --context,
--namespace, the in-cluster service account); ``runner`` the pod runner (submit, wait with a
deadline, logs, delete); ``pods`` reads pod documents, judges each container's imageID against
the digest expected and records the final pull (``imagekit ledger record-pod``).
"""
