# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The stand-in's Ray executor: --distributed-executor-backend ray (test fixture, never deployed).

What vLLM 0.8.5 does with that backend, where the rollout depends on it (vllm/executor/ray_utils.py,
initialize_ray_cluster and _wait_until_pg_ready; vllm/executor/ray_distributed_executor.py):
- it joins the cluster that RAY_ADDRESS names (ray.init(address=None) reads it); without Ray in the
  image: "Failed to import Ray, please install Ray with `pip install ray`.";
- when the cluster has fewer GPUs than tensor_parallel_size x pipeline_parallel_size it warns "The
  number of required GPUs exceeds the total number of available GPUs in the placement group." and
  waits for the placement group anyway: one bundle {"GPU": 1.0} per rank, the first pinned to the
  driver's own node ("node:<VLLM_HOST_IP>": 0.001), "Waiting for creating a placement group of specs
  for N seconds" with a doubling interval, up to PG_WAIT_TIMEOUT (1800 s), then a ValueError. It does
  not listen meanwhile: the server's health waits for the whole cluster;
- one Ray worker per bundle, ranked as vLLM ranks them (the driver's node first, then the other nodes by
  IP address as a string: sort_by_driver_then_worker_ip); rank r is stage r // tp. Every completion here goes through
  the stages in order, one remote call per stage on the stage's first rank, so a completion needs
  every member; a worker whose node died fails the request and takes the engine down (vLLM's engine
  dies with a RayActorError and the server exits).
It logs the layout (stage, rank, node address, the GPU Ray gave the rank) once the workers run.
"""

import os
import sys
import time

PG_WAIT_TIMEOUT = float(os.environ.get("STANDIN_PG_WAIT_TIMEOUT", "1800") or 1800)


def log(message):
    sys.stderr.write("INFO %s standin_ray: %s\n" % (time.strftime("%m-%d %H:%M:%S"), message))
    sys.stderr.flush()


class Pipeline:
    """The ranks as Ray actors, one per placement-group bundle; forward() runs a request through them."""

    def __init__(self, ray, workers, layout, tp):
        self.ray = ray
        self.workers = workers
        self.layout = layout
        self.tp = tp
        self.calls = 0

    def forward(self, request_id):
        """One remote call per stage, in order (stage s on rank s * tp); returns the node addresses passed.
        A dead worker: the engine is dead (vLLM's server exits); the process exits 1 after logging it."""
        path = []
        try:
            for stage in range(len(self.workers) // self.tp):
                path.append(self.ray.get(self.workers[stage * self.tp].forward.remote(request_id, stage), timeout=30))
        except Exception as exc:  # pylint: disable=broad-except  # ray.exceptions.* differ across releases
            log("ERROR: the engine died: stage %d failed: %s: %s" % (len(path), type(exc).__name__, exc))
            os._exit(1)  # pylint: disable=protected-access
        self.calls += 1
        if self.calls == 1 or self.calls % 100 == 0:
            log("request %s went through stages %s (%d requests so far)" % (request_id, " -> ".join(path), self.calls))
        return path


def start(tp, pp):
    """Join the cluster, wait for the placement group, start one worker per rank; a Pipeline."""
    try:
        import ray  # pylint: disable=import-outside-toplevel
        from ray.util.placement_group import placement_group  # pylint: disable=import-outside-toplevel
        from ray.util.scheduling_strategies import (  # pylint: disable=import-outside-toplevel
            PlacementGroupSchedulingStrategy)
    except ImportError as exc:
        log("ERROR: Failed to import Ray, please install Ray with `pip install ray`. (%s)" % exc)
        raise SystemExit(1) from None
    world = tp * pp
    ray.init(address=os.environ.get("RAY_ADDRESS") or None, logging_level="WARNING", log_to_driver=False)
    driver_ip = os.environ.get("VLLM_HOST_IP") or ray.util.get_node_ip_address()
    gpus = ray.cluster_resources().get("GPU", 0)
    log("connected to the Ray cluster at %s: %d node(s), %g GPU(s); world size %d (TP %d x PP %d), driver on %s"
        % (os.environ.get("RAY_ADDRESS", "(local)"), len([n for n in ray.nodes() if n.get("Alive")]), gpus, world,
           tp, pp, driver_ip))
    if world > gpus:
        log("WARNING: The number of required GPUs exceeds the total number of available GPUs in the placement group.")
    specs = [{"GPU": 1.0} for rank in range(world)]
    specs[0]["node:%s" % driver_ip] = 0.001
    group = placement_group(specs, strategy="PACK")
    ready_ref = group.ready()
    began = time.time()
    interval = 10
    while time.time() - began < PG_WAIT_TIMEOUT:
        ready, pending = ray.wait([ready_ref], timeout=interval)
        del pending
        if ready:
            break
        interval *= 2
        log("Waiting for creating a placement group of specs for %d seconds. specs=%s. Check `ray status` to see "
            "if you have enough resources, and make sure the IP addresses used by ray cluster are the same as "
            "VLLM_HOST_IP environment variable specified in each node if you are running on a multi-node."
            % (int(time.time() - began), specs))
    try:
        ray.get(ready_ref, timeout=0)
    except ray.exceptions.GetTimeoutError:
        log("ERROR: ValueError: Cannot provide a placement group of placement_group_specs=%s within %d seconds. "
            "See `ray status` to make sure the cluster has enough resources." % (specs, PG_WAIT_TIMEOUT))
        raise SystemExit(1) from None

    @ray.remote(num_gpus=1, num_cpus=0)
    class Worker:  # pylint: disable=too-few-public-methods
        """One rank: where Ray put it, and a stage's share of a request."""

        def where(self):
            return {"address": ray.util.get_node_ip_address(), "gpu": [str(g) for g in ray.get_gpu_ids()],
                    "nccl_ifname": os.environ.get("NCCL_SOCKET_IFNAME", ""), "pid": os.getpid()}

        def forward(self, request_id, stage):
            del request_id, stage
            return ray.util.get_node_ip_address()

    workers = [Worker.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
        placement_group=group, placement_group_bundle_index=index)).remote() for index in range(world)]
    places = ray.get([w.where.remote() for w in workers])
    # The ranks as vLLM 0.8.5 gives them (ray_distributed_executor.py, sort_by_driver_then_worker_ip): the
    # driver's node first, then nodes with fewer workers, then by IP address as a string.
    counts = {}
    for place in places:
        counts[place["address"]] = counts.get(place["address"], 0) + 1
    order = sorted(range(world), key=lambda i: (places[i]["address"] != driver_ip, counts[places[i]["address"]],
                                                places[i]["address"]))
    workers = [workers[i] for i in order]
    layout = [places[i] for i in order]
    for rank, place in enumerate(layout):
        log("rank %d (stage %d, TP rank %d) on %s GPU %s (NCCL_SOCKET_IFNAME=%s)"
            % (rank, rank // tp, rank % tp, place["address"], ",".join(place["gpu"]) or "?",
               place["nccl_ifname"] or "-"))
    return Pipeline(ray, workers, layout, tp)
