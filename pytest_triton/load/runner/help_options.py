"""`locust -f LOCUSTFILE --help` lists pytest-triton's options.

Locust prints its help before it imports the locustfile, so the listener that adds our options
(`options.add_options`) is not registered yet. The `pytest_triton_locust.pth` file this package
installs imports this module when `locust` runs with -h/--help (and only then), so our options
appear where Locust users look, as a pytest plugin's appear in `pytest --help`.
"""

from locust import events

from pytest_triton.load.runner.options import add_options

events.init_command_line_parser.add_listener(add_options)
