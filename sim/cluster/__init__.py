"""A cluster of kvsim engines behind a router, on one clock (docs/semantics.md, "Clusters")."""

from sim.cluster.routers import Arrival, Router, RouterView, make_router
from sim.cluster.run import ClusterConfig, ClusterResult, simulate_cluster

__all__ = [
    "Arrival",
    "ClusterConfig",
    "ClusterResult",
    "Router",
    "RouterView",
    "make_router",
    "simulate_cluster",
]
