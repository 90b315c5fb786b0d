"""setuptools' hooks for what pyproject.toml cannot say: pytest_triton_locust.pth at the top of
site-packages (see pytest_triton/load/runner/help_options.py for why it exists), and the load
multiplexer's HTTP pump in C (client/wire/_http_pump.c), optional: without a C compiler the
install goes on and the multiplexer reads every answer in Python."""

from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

PTH = "pytest_triton_locust.pth"


class BuildPyWithPth(build_py):
    def run(self) -> None:
        super().run()
        self.copy_file(PTH, str(Path(self.build_lib) / PTH))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH)]


HTTP_PUMP = Extension(
    "pytest_triton.client.wire._http_pump",
    ["pytest_triton/client/wire/_http_pump.c"],
    optional=True,
)

setup(cmdclass={"build_py": BuildPyWithPth}, ext_modules=[HTTP_PUMP])
