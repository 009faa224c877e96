"""The Kubernetes objects of one deployment: the pod plumbing every pod shares, written once,
and the ConfigMaps, Services and per-rank StatefulSets built from what the engine returns."""
