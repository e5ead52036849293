"""Who this process is (``Identity``) and the OpenTelemetry resource made from it."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from otel_verl import private_api, semconv
from otel_verl._safe import warn_once
from otel_verl.config import settings
from otel_verl.package import package_version
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


def build_resource(identity: Identity) -> Resource:
    # imported here: this module is loaded wherever verl is, the SDK only where telemetry is built
    from opentelemetry.sdk.environment_variables import OTEL_SERVICE_NAME
    from opentelemetry.sdk.resources import Resource

    attrs: dict[str, Any] = {
        semconv.RES_ROLE: identity.role,
        semconv.RES_PROCESS_PID: os.getpid(),
        semconv.RES_HOST_NAME: socket.gethostname(),
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
    if not os.environ.get(OTEL_SERVICE_NAME):
        attrs[semconv.RES_SERVICE_NAME] = semconv.SERVICE_NAME_DEFAULT
    # Resource.create merges OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME on top.
    return Resource.create(attrs)
