"""The Kubernetes side: the cluster bridge (objects -> contract events) and the evictor.

Both speak only the public contract: the bridge produces input events on the input topics,
the evictor consumes `requeue.committed` from the decisions topic. Nothing here touches the
database (docs/kubernetes.md).
"""
