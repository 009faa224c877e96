"""The rank-connectivity rehearsal: the engine's own connection code, one process per rank, in the
network namespace of the Spark the rank is pinned to, behind a stand-in for kube-router."""
