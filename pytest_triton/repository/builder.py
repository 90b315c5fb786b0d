"""Writes a Triton model repository from specs: plan first, export each variant on demand.

Exports are lazy because a session that selects one test (`-k mnist`) should not wait for
every model of the zoo to be exported.
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from pytest_triton.base.errors import SpecError
from pytest_triton.base.formats import FORMATS
from pytest_triton.base.processes import reap_orphaned
from pytest_triton.base.server_offer import ServerTarget
from pytest_triton.repository import export_cache, exporters, pbtxt, warmup
from pytest_triton.repository.reference import NativeModel
from pytest_triton.repository.signature import Signature, resolve_signature
from pytest_triton.repository.spec import ModelSpec
from pytest_triton.repository.variants import Plan, Unavailable, Variant, plan_variants

log = logging.getLogger("pytest_triton")
HOSTED_MODEL = Path(__file__).with_name("hosted_model.py")
TEMPORARY_PREFIX = "pytest-triton-repo-"  # then the owner's pid, so orphans can be reaped
Progress = Callable[[str], None]


def reap_orphaned_repositories() -> list[Path]:
    """Remove temporary repositories of processes that were killed outright."""
    return reap_orphaned(tempfile.gettempdir(), TEMPORARY_PREFIX, "-")


_TEMPORARY: set[Path] = set()  # temporary repositories not yet removed


@atexit.register
def _remove_temporaries() -> None:
    """Whatever a teardown did not reach: a Ctrl-C during the teardown of the fixture before
    (a server's stop) skips the repository fixture's own teardown."""
    for root in list(_TEMPORARY):
        shutil.rmtree(root, ignore_errors=True)
        _TEMPORARY.discard(root)


class Repository:
    """A model repository directory, the specs it holds, and (once planned for a server's
    backends) its variants, each exported when first needed."""

    def __init__(
        self,
        root: Path,
        specs: Sequence[ModelSpec],
        *,
        formats: Sequence[str] = FORMATS,
        progress: Progress | None = None,
        precisions: Sequence[str] | None = None,
        warmup: int | None = None,
    ) -> None:
        self.root = Path(root)
        self.specs = list(specs)
        self.formats = tuple(formats)
        self.precisions = tuple(precisions) if precisions else None
        self.warmup = warmup  # None: on for GPU servers (variants.DEFAULT_GPU_WARMUP)
        plan_variants(self.specs, self.formats, ServerTarget())  # validates before any export
        self._plan: Plan | None = None
        self._target: ServerTarget | None = None
        self._progress = progress or log.info
        self._signatures: dict[str, Signature] = {}
        self._natives: dict[tuple[str, int, str], NativeModel] = {}
        self._built: set[str] = set()  # model directories written (by Triton model name)
        self._lock = threading.RLock()
        self.temporary = False
        self.root.mkdir(parents=True, exist_ok=True)

    @classmethod
    def create(
        cls,
        specs: Sequence[ModelSpec],
        directory: str | Path | None = None,
        *,
        formats: Sequence[str] = FORMATS,
        progress: Progress | None = None,
        precisions: Sequence[str] | None = None,
        warmup: int | None = None,
    ) -> Repository:
        """A repository in `directory` (kept), or in a temporary directory that `remove()`
        deletes; temporary directories of processes killed outright are reaped here."""

        def make(root: Path) -> Repository:
            return cls(
                root,
                specs,
                formats=formats,
                progress=progress,
                precisions=precisions,
                warmup=warmup,
            )

        if directory is not None:
            return make(Path(directory))
        reap_orphaned_repositories()
        root = Path(tempfile.mkdtemp(prefix=f"{TEMPORARY_PREFIX}{os.getpid()}-"))
        _TEMPORARY.add(root)
        try:
            repository = make(root)
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            _TEMPORARY.discard(root)
            raise
        repository.temporary = True
        return repository

    def remove(self) -> None:
        """Delete the directory if this repository made it for itself (an interrupted
        removal is finished at exit)."""
        if self.temporary:
            shutil.rmtree(self.root, ignore_errors=True)
            _TEMPORARY.discard(self.root)

    def plan(self, target: ServerTarget | Iterable[str]) -> list[Variant]:
        """Decide native or hosted per format (and the device) for this server; accepts a
        ServerTarget or just the server's backend names."""
        if not isinstance(target, ServerTarget):
            target = ServerTarget(backends=frozenset(target))
        with self._lock:
            if self._target is not None and self._target != target:
                raise SpecError(
                    f"repository {self.root} is already planned for a server with "
                    f"{self._target}; a server with {target} needs its own repository fixture"
                )
            self._target = target
            self._plan = plan_variants(
                self.specs, self.formats, target, precisions=self.precisions, warmup=self.warmup
            )
            return self._plan.variants

    @property
    def target(self) -> ServerTarget:
        """The server this repository was planned for."""
        if self._target is None:
            raise SpecError(
                "the repository has not been planned for a server yet (Repository.plan(target))"
            )
        return self._target

    @property
    def variants(self) -> list[Variant]:
        if self._plan is None:
            raise SpecError(
                "the repository has not been planned for a server yet (Repository.plan(target))"
            )
        return self._plan.variants

    @property
    def unavailable(self) -> list[Unavailable]:
        """Variants the planned server cannot serve, each with the reason."""
        self.variants  # noqa: B018 - raises when not planned yet
        assert self._plan is not None
        return self._plan.unavailable

    def variant(self, key: str) -> Variant:
        """A variant by id (mnist-onnx-hosted) or Triton model name (mnist_onnx)."""
        for v in self.variants:
            if key in (v.id, v.model_name):
                return v
        known = ", ".join(v.id for v in self.variants) or "none"
        raise SpecError(f"no variant {key!r} in the repository (it has: {known})")

    def signature(self, spec: ModelSpec) -> Signature:
        with self._lock:
            if spec.name not in self._signatures:
                self._signatures[spec.name] = resolve_signature(spec)
            return self._signatures[spec.name]

    def native(self, variant: Variant) -> NativeModel:
        """The PyTorch reference for a variant, at its precision, where its instances run
        (CUDA for KIND_GPU ones, as the examples' deployer traces on the GPU); each device and
        precision has its own copy, the user's module stays where it was."""
        device = "cuda" if variant.gpu else "cpu"
        key = (variant.spec.name, variant.spec.version, f"{variant.precision}@{device}")
        with self._lock:
            if key not in self._natives:
                self._natives[key] = NativeModel(variant.spec, variant.precision, device)
            return self._natives[key]

    def model_dir(self, variant: Variant) -> Path:
        return self.root / variant.model_name

    def config(self, variant: Variant) -> mc.ModelConfig:
        return pbtxt.model_config(variant, self.signature(variant.spec))

    def ensure(self, variant: Variant) -> Path:
        """Export the variant's artifact and write its config, once."""
        with self._lock:
            directory = self.model_dir(variant)
            if variant.model_name in self._built:
                return directory
            started = time.perf_counter()
            self._progress(f"exporting {variant.id} ...")
            staging = directory.with_name(directory.name + ".partial")
            shutil.rmtree(staging, ignore_errors=True)
            try:
                version_dir = staging / str(variant.spec.version)
                signature = self.signature(variant.spec)
                how = self._export(variant, version_dir, signature)
                if variant.hosted:
                    shutil.copyfile(HOSTED_MODEL, version_dir / "model.py")
                warmup.write_samples(staging, variant, signature)
                pbtxt.write_config(staging, pbtxt.model_config(variant, signature))
                shutil.rmtree(directory, ignore_errors=True)
                staging.rename(directory)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            self._built.add(variant.model_name)
            self._progress(f"exported {variant.id} in {time.perf_counter() - started:.1f}s{how}")
            return directory

    def _export(self, variant: Variant, version_dir: Path, signature: Signature) -> str:
        """Export the variant into `version_dir`, or take it from the export cache
        (export_cache.py) where one is set; says which for the progress line."""
        spec, native = variant.spec, self.native(variant)
        cache = export_cache.directory()
        entry = export_cache.key(variant.format, spec, native, signature) if cache else None
        if cache and entry and export_cache.restore(cache, entry, version_dir):
            return " (from the export cache)"
        exporters.export(
            variant.format,
            spec,
            native,
            version_dir / variant.artifact,
            signature,
            numerics=self.target.numerics,
        )
        if cache and entry:
            export_cache.store(cache, entry, version_dir)
        return ""

    def add_version(self, variant: Variant, spec: ModelSpec) -> Variant:
        """Another version of a variant's model: `spec` (the same name and signature, another
        version; other weights, say) exported into the variant's model directory beside the
        versions already there. Returns the new version's variant. The config stays as it is:
        a load whose version_policy names the versions chooses what is served (see
        versions_config)."""
        new, staged = self.stage_version(variant, spec)
        self.install_version(new, staged)
        return new

    def stage_version(self, variant: Variant, spec: ModelSpec) -> tuple[Variant, Path]:
        """Export another version (as add_version) into a directory outside the repository:
        a server polling the repository sees neither a half-written version nor the
        staging directory. install_version moves it in."""
        new = dataclasses.replace(variant, spec=spec)
        if new.model_name != variant.model_name or spec.version == variant.spec.version:
            raise SpecError(
                f"version {spec.version} of {spec.name!r} cannot be served as another version "
                f"of {variant.model_name!r} (version {variant.spec.version}): give the spec "
                "the same name and another version"
            )
        signature = self.signature(variant.spec)
        if resolve_signature(spec) != signature:
            raise SpecError(
                f"version {spec.version} of {spec.name!r} has another signature than version "
                f"{variant.spec.version}: a model's versions share one config"
            )
        self.ensure(variant)
        with self._lock:
            started = time.perf_counter()
            self._progress(f"exporting {variant.id} version {spec.version} ...")
            # beside the root, not in it (same file system, so the move in is a rename)
            staging = Path(tempfile.mkdtemp(prefix=f".{self.root.name}.", dir=self.root.parent))
            staged = staging / str(spec.version)
            try:
                how = self._export(new, staged, signature)
                if variant.hosted:
                    shutil.copyfile(HOSTED_MODEL, staged / "model.py")
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            self._progress(
                f"exported {variant.id} version {spec.version} in "
                f"{time.perf_counter() - started:.1f}s{how}"
            )
        return new, staged

    def install_version(self, new: Variant, staged: Path) -> Path:
        """Move a version stage_version exported into its model directory (one rename)."""
        with self._lock:
            target = self.model_dir(new) / str(new.spec.version)
            try:
                shutil.rmtree(target, ignore_errors=True)
                staged.rename(target)
            finally:
                shutil.rmtree(staged.parent, ignore_errors=True)
            return target

    def write_versions_config(self, variant: Variant, versions: Sequence[int] | None) -> Path:
        """Rewrite the model's config.pbtxt on disk to serve exactly `versions` (None: every
        version present), in one rename, so that a server polling the repository never reads
        half a file: how a repository in poll mode chooses the versions served."""
        config = self.config(variant)
        if versions is None:
            config.version_policy.all.SetInParent()
        else:
            config.version_policy.specific.versions[:] = sorted(versions)
        directory = self.model_dir(variant)
        partial = directory / ".config.pbtxt.partial"
        partial.write_text(pbtxt.to_text(config))
        return partial.replace(directory / "config.pbtxt")

    def versions_config(self, variant: Variant, versions: Sequence[int]) -> mc.ModelConfig:
        """The variant's config serving exactly `versions` (version_policy specific)."""
        config = self.config(variant)
        config.version_policy.specific.versions[:] = sorted(versions)
        return config

    def derive(self, base: Variant, spec: ModelSpec) -> Variant:
        """`base`'s exported artifact served under another configuration: `spec` is base's
        spec with other serving fields (max_batch_size, dynamic_batching, instance_group,
        parameters) and its own `triton_name`. Its model directory links to base's files
        (nothing is exported again) and holds its own config.pbtxt; load it like any variant.
        The signature and the PyTorch reference stay base's (they are kept by spec name)."""
        if spec.name != base.spec.name or not spec.triton_name:
            raise SpecError(
                f"a derived configuration of {base.spec.name!r} keeps its spec name and "
                f"gives a triton_name of its own (got {spec.name!r}, {spec.triton_name!r})"
            )
        variant = dataclasses.replace(base, spec=spec)
        if variant.model_name == base.model_name:
            raise SpecError(f"a derived configuration needs a name other than {base.model_name!r}")
        with self._lock:
            source = self.ensure(base)
            directory = self.model_dir(variant)
            shutil.rmtree(directory, ignore_errors=True)
            shutil.copytree(source, directory, copy_function=_link_or_copy, ignore=_own_files)
            signature = self.signature(base.spec)
            warmup.write_samples(directory, variant, signature)
            pbtxt.write_config(directory, pbtxt.model_config(variant, signature))
            self._built.add(variant.model_name)
            return variant

    def discard(self, variant: Variant) -> None:
        """Remove a derived variant's directory (the server must have unloaded it)."""
        with self._lock:
            shutil.rmtree(self.model_dir(variant), ignore_errors=True)
            self._built.discard(variant.model_name)

    def ensure_all(self) -> None:
        for variant in self.variants:
            self.ensure(variant)

    def files(self, variant: Variant) -> dict[str, bytes]:
        """The variant's version directory as Triton's load API takes it (file:<version>/...)."""
        directory = self.ensure(variant)
        return {
            f"file:{p.relative_to(directory).as_posix()}": p.read_bytes()
            for p in sorted(directory.rglob("*"))
            if p.is_file() and p.name != "config.pbtxt"
        }


def _link_or_copy(source: str, destination: str) -> object:
    """Hard-link an artifact (gigabytes for a large model), copying where links fail."""
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)
    return destination


def _own_files(_directory: str, names: list[str]) -> list[str]:
    """Left out of a derived directory: its own config and warm-up samples are written anew
    (never through a hard link into base's files)."""
    return [n for n in names if n in ("config.pbtxt", warmup.WARMUP_DIR)]
