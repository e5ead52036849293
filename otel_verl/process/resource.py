"""Who this process is (``Identity``) and the OpenTelemetry resource made from it."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from otel_verl import semconv
from otel_verl.config import settings
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


def ray_actor_class() -> str | None:
    """The class name of the Ray actor this process runs (``TaskRunner``, ``AgentLoopWorker``...),
    or None (not an actor, or not created yet; or Ray moved this private name)."""
    try:
        import ray

        if not ray.is_initialized():  # get_runtime_context() would start a local Ray cluster (auto-init)
            return None
        handle = ray.get_runtime_context().current_actor
        return str(handle._ray_actor_creation_function_descriptor.class_name)  # noqa: SLF001
    except Exception:  # noqa: BLE001 - not an actor (the driver): the pid still says who
        return None


def build_resource(identity: Identity) -> Resource:
    # imported here: this module is loaded wherever verl is, the SDK only where telemetry is built
    from opentelemetry.sdk.environment_variables import OTEL_SERVICE_NAME
    from opentelemetry.sdk.resources import Resource

    attrs: dict[str, Any] = {
        semconv.RES_ROLE: identity.role,
        "process.pid": os.getpid(),
        "host.name": socket.gethostname(),
        "telemetry.distro.name": "otel-verl",
        "telemetry.distro.version": __version__,
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
    attrs["service.instance.id"] = f"{instance}-{os.getpid()}"
    attrs.update(identity.extra)
    if not os.environ.get(OTEL_SERVICE_NAME):
        attrs["service.name"] = semconv.SERVICE_NAME_DEFAULT
    # Resource.create merges OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME on top.
    return Resource.create(attrs)
