"""The contract of plugin/fixture_lookup.py, the plugin's one use of a private part of pytest
(FixtureManager.getfixturedefs): which definition of a fixture name a test sees, as pytest
would give it, nearest first; and the parametrization built on it."""

from __future__ import annotations

import pytest

from pytest_triton.plugin.fixture_lookup import visible_fixture

CONFTEST = """
import pytest

@pytest.fixture
def named():
    pass
"""
MODULE = """
import pytest

def marked(func):
    func.where = func.__qualname__  # as factories marks the function it hands to pytest
    return func

@pytest.fixture
@marked
def named():
    pass

@pytest.fixture
@marked
def only_here():
    pass

def test_module(): pass

class TestClass:
    @pytest.fixture
    @marked
    def named(self):
        pass

    def test_class(self): pass
"""


def test_pytest_names_the_nearest_definition_a_test_sees(pytester: pytest.Pytester) -> None:
    """Class over module over conftest, the function as it was decorated; None where no
    definition is visible. An upgrade of pytest that breaks this fails here."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_other="def test_other(): pass")
    module = pytester.makepyfile(test_here=MODULE)
    items = {item.name: item for item in pytester.getitems(module)}
    (other,) = pytester.getitems(pytester.path / "test_other.py")
    assert getattr(visible_fixture(items["test_module"], "named"), "where", None) == "named"
    assert getattr(visible_fixture(items["test_class"], "named"), "where", None) == (
        "TestClass.named"
    )
    found = visible_fixture(other, "named")
    assert found is not None and not hasattr(found, "where")  # the conftest's
    assert visible_fixture(other, "only_here") is None  # another module's
    assert visible_fixture(items["test_module"], "nowhere") is None


ROLES_CONFTEST = """
from pytest_triton import factories

triton_repository = factories.repository([])
http_server = factories.server(protocol="http")
grpc_server = factories.server(protocol="grpc")
my_client = factories.client(server="http_server")
"""
ROLES_MODULE = """
import pytest
from pytest_triton import factories

my_client = factories.client(server="grpc_server")  # nearer than the conftest's

def test_mine(my_client): pass

class TestPlain:
    @pytest.fixture
    def my_client(self):  # a plain fixture: nothing to parametrize
        return None

    def test_plain(self, my_client): pass
"""


def test_the_nearest_factory_fixture_decides_the_parameters(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(ROLES_CONFTEST)
    pytester.makepyfile(test_mine=ROLES_MODULE, test_theirs="def test_theirs(my_client): pass")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--collect-only", "-q")
    assert result.ret == 0, result.stdout.str()
    collected = sorted(line for line in result.stdout.lines if "::" in line)
    assert collected == [
        "test_mine.py::TestPlain::test_plain",
        "test_mine.py::test_mine[grpc]",
        "test_theirs.py::test_theirs[http]",
    ]
