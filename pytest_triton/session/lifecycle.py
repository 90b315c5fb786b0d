"""The server lifecycle, below every front end: pick the launcher, plan the repository for what
its server offers, start it, and hand back a Deployment.

The pytest fixtures, the Locust embedded server and the CLIs all start servers here, so none
of them imports another's module.
"""

from __future__ import annotations

import functools

from pytest_triton.base.config import TritonConfig
from pytest_triton.base.server_offer import ServerTarget
from pytest_triton.repository.builder import Repository
from pytest_triton.server.choice import make_launcher
from pytest_triton.server.launcher import Launcher, ServerArgs
from pytest_triton.session.deployment import Deployment


@functools.lru_cache(maxsize=16)
def launcher_for(config: TritonConfig) -> Launcher:
    """One launcher per distinct configuration: what its server offers is asked once (for a
    GPU container that runs the image), at collection and at start alike."""
    return make_launcher(config)


def server_target(config: TritonConfig) -> ServerTarget:
    return launcher_for(config).target()


def start_deployment(config: TritonConfig, repo: Repository) -> Deployment:
    """Plan the repository for the launcher's server and start a server on it."""
    launcher = launcher_for(config)
    repo.plan(launcher.target())
    if config.server.model_control != "explicit" and not config.server.deployed:
        repo.ensure_all()  # none/poll modes load everything present at start
    args = ServerArgs(
        model_repository=repo.root,
        model_control_mode=config.server.model_control,
        log_verbose=config.server.log_verbose,
        startup_timeout_s=config.server.startup_timeout,
        extra_args=config.server.server_args,
        address=config.server.serve_address,
    )
    return Deployment(
        launcher.start(args),
        repo,
        timeout_s=config.client.request_timeout,
        output_shared_memory_size=config.client.output_shared_memory_size,
        replicas=config.server.replicas,
    )
