"""setuptools' hook for the one file pyproject.toml cannot place: pytest_triton_locust.pth at the
top of site-packages (see pytest_triton/load/runner/help_options.py for why it exists)."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "pytest_triton_locust.pth"


class BuildPyWithPth(build_py):
    def run(self) -> None:
        super().run()
        self.copy_file(PTH, str(Path(self.build_lib) / PTH))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH)]


setup(cmdclass={"build_py": BuildPyWithPth})
