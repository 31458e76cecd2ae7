"""A local Ray cluster of several nodes on this one machine (Ray's own way to test multi-node code,
``ray.cluster_utils.Cluster``), for the tests and benchmarks of ``--ray`` (demo/load/fleet.py):

    with local_cluster(2) as address:
        fleet_at(address, 2)  # a worker per node

Each node offers one CPU (a worker's) and a small object store; the cluster is shut down, and this
process's Ray connection with it, on the way out. Ray is imported here only when called.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

NODE_CPUS = 1
OBJECT_STORE_BYTES = 80 * 1024 * 1024  # Ray's minimum is 75 MiB; the records come back as objects
NODES_UP_S = 120.0  # a busy machine's raylets take tens of seconds


@contextmanager
def local_cluster(nodes: int = 2) -> Iterator[str]:
    """``nodes`` Ray nodes on this machine, their head's address yielded; all stopped after."""
    if nodes < 1:
        raise ValueError(f"a cluster has at least one node, not {nodes}")
    import ray
    from ray.cluster_utils import Cluster

    from demo.load.fleet import fleet_at

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": NODE_CPUS, "object_store_memory": OBJECT_STORE_BYTES,
                                                      "include_dashboard": False})
    try:
        for _ in range(nodes - 1):
            c.add_node(num_cpus=NODE_CPUS, object_store_memory=OBJECT_STORE_BYTES)
        c.wait_for_nodes(timeout=NODES_UP_S)
        yield c.address
    finally:
        fleet_at.cache_clear()
        ray.shutdown()
        c.shutdown()
