"""Who this process is (``Identity``) and the OpenTelemetry resource made from it."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from otel_verl import private_api, semconv
from otel_verl._safe import warn_once
from otel_verl.config import settings
from otel_verl.package import VERL, package_version
from otel_verl.version import __version__

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource


@dataclass
class Identity:
    """Who this process is; becomes the resource."""

    role: str = semconv.ROLE_UNKNOWN
    rank: int | None = None
    project: str | None = None
    experiment: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``taskrunner``, ``worker0``...: names this process's telemetry files."""
        return self.role if self.rank is None else f"{self.role}{self.rank}"


UNKNOWN_ACTOR = "<unknown>"  # a Ray actor whose class this Ray no longer tells (see ray_actor_class)


def ray_actor_class() -> str | None:
    """The class name of the Ray actor this process runs (``TaskRunner``, ``AgentLoopWorker``...);
    None when it is not an actor (the driver, Ray not started or not a Ray process); and
    ``UNKNOWN_ACTOR`` when it is one but its class cannot be told (Ray moved the private name that
    says it, said once with Ray's version). Callers decide what is safe when they cannot tell."""
    try:
        import ray
    except ImportError:
        return None
    try:
        if not ray.is_initialized():  # get_runtime_context() would start a local Ray cluster (auto-init)
            return None
        context = ray.get_runtime_context()
        if context.get_actor_id() is None:  # public: None outside an actor (the driver)
            return None
        handle = context.current_actor
    except Exception:  # noqa: BLE001 - a Ray whose public runtime context changed: an actor we cannot name
        warn_once(
            "ray actor class", "cannot tell this Ray actor's class (ray %s)", package_version("ray"), exc_info=True
        )
        return UNKNOWN_ACTOR
    name = private_api.attribute(
        handle,
        "_ray_actor_creation_function_descriptor.class_name",
        name="ActorHandle._ray_actor_creation_function_descriptor.class_name",
        dists=("ray",),
        effect="this actor's class is unknown: verl's agent-loop and reward-loop hooks stay off in it",
    )
    return UNKNOWN_ACTOR if name is None else str(name)


# Where the process runs, from its node's environment: Slurm sets SLURM_* in every task of a job
# step (and Ray's processes on a node inherit them from its raylet); Kubernetes gives the pod's own
# through the downward API, mapped by the user to these names (docs/multi-node.md). Not OTEL_*
# variables: those travel to every Ray process with the launcher's values (hooks/ray_launch.py).
FROM_ENV: tuple[tuple[str, str], ...] = (
    (semconv.RES_K8S_POD_NAME, "K8S_POD_NAME"),
    (semconv.RES_K8S_POD_UID, "K8S_POD_UID"),
    (semconv.RES_K8S_NAMESPACE_NAME, "K8S_NAMESPACE_NAME"),
    (semconv.RES_K8S_NODE_NAME, "K8S_NODE_NAME"),
    (semconv.RES_SLURM_CLUSTER_NAME, "SLURM_CLUSTER_NAME"),
    (semconv.RES_SLURM_JOB_ID, "SLURM_JOB_ID"),
    (semconv.RES_SLURM_STEP_ID, "SLURM_STEP_ID"),
    (semconv.RES_SLURM_NODE_ID, "SLURM_NODEID"),
)
_ENV_VALUE_MAX = 256  # names and ids: bounded whatever the environment holds


def _from_env() -> dict[str, str]:
    out = {}
    for attr, var in FROM_ENV:
        value = os.environ.get(var, "").strip()
        if value:
            out[attr] = value[:_ENV_VALUE_MAX]
    return out


def _verl_version() -> dict[str, str]:
    version = package_version(VERL)  # the service is verl: its version (read once per process)
    return {} if version == "unknown" else {semconv.RES_SERVICE_VERSION: version}


def _user_set() -> frozenset[str]:
    """The resource attributes the user set (``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_SERVICE_NAME``)."""
    from opentelemetry.sdk.environment_variables import OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME

    # their keys only, read as the SDK's OTELResourceDetector reads them (which warns of a bad entry itself)
    keys = {item.split("=", 1)[0].strip() for item in os.environ.get(OTEL_RESOURCE_ATTRIBUTES, "").split(",")}
    if os.environ.get(OTEL_SERVICE_NAME):
        keys.add(semconv.RES_SERVICE_NAME)
    return frozenset(keys)


def build_resource(identity: Identity) -> Resource:
    # imported here: this module is loaded wherever verl is, the SDK only where telemetry is built
    from opentelemetry.sdk.resources import Resource

    # defaults: what the user set in OTEL_RESOURCE_ATTRIBUTES / OTEL_SERVICE_NAME wins over them
    # (Resource.create merges the given attributes over the environment's, so they are left out here)
    defaults: dict[str, Any] = {
        semconv.RES_SERVICE_NAME: semconv.SERVICE_NAME_DEFAULT,
        semconv.RES_HOST_NAME: socket.gethostname(),
        **_from_env(),
        **_verl_version(),
    }
    user = _user_set()
    attrs: dict[str, Any] = {k: v for k, v in defaults.items() if k not in user}
    # this process's identity: facts of the process, ours whatever a job-wide variable says
    attrs |= {
        semconv.RES_ROLE: identity.role,
        semconv.RES_PROCESS_PID: os.getpid(),
        semconv.RES_DISTRO_NAME: semconv.DISTRO_NAME,
        semconv.RES_DISTRO_VERSION: __version__,
    }
    run_id = settings().run_id
    if run_id:
        attrs[semconv.RES_RUN_ID] = run_id
    if identity.rank is not None:
        attrs[semconv.RES_RANK] = identity.rank
    project = identity.project or settings().project
    experiment = identity.experiment or settings().experiment
    if project:
        attrs[semconv.RES_PROJECT] = project
    if experiment:
        attrs[semconv.RES_EXPERIMENT] = experiment
    instance = f"{run_id or 'run'}-{identity.role}"
    if identity.rank is not None:
        instance += f"-{identity.rank}"
    attrs[semconv.RES_SERVICE_INSTANCE_ID] = f"{instance}-{os.getpid()}"
    attrs.update(identity.extra)
    return Resource.create(attrs)
