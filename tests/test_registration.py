"""The registration rules written once: which names a registration still owns, the bound-to rule."""

from __future__ import annotations

import uuid

import attrs
import pytest

from lionfactory import Branch, function_tool
from lionfactory._registration import foreign_tool
from lionfactory.errors import RegistrationError


def ping() -> str:
    """Answer pong."""
    return "pong"


def pong() -> str:
    """Answer ping."""
    return "ping"


def both() -> list:
    return [function_tool(ping), function_tool(pong)]


def test_a_registration_no_longer_owns_a_name_a_later_update_took():
    branch = Branch()
    branch.register(both)
    first = branch.provenance("ping")
    branch.register(function_tool(ping), update=True)
    assert first.still_owned(branch.provenance_or_none) == ["pong"]
    assert branch.provenance("ping").still_owned(branch.provenance_or_none) == ["ping"]
    clone = branch.clone()
    assert clone.provenance("pong").is_factory
    assert not clone.provenance("ping").is_factory


def test_foreign_tool_is_one_bound_elsewhere_and_none_means_any_binding():
    mine, other = uuid.uuid4(), uuid.uuid4()
    free = function_tool(ping)
    bound_here = attrs.evolve(function_tool(pong), bound_to=mine)
    bound_there = attrs.evolve(function_tool(pong), bound_to=other)
    assert foreign_tool([free, bound_here], mine) is None
    assert foreign_tool([free, bound_there], mine) is bound_there
    assert foreign_tool([free, bound_here], None) is bound_here


def test_a_static_tool_bound_to_another_branch_is_refused():
    tool = attrs.evolve(function_tool(ping), bound_to=uuid.uuid4())
    with pytest.raises(RegistrationError, match="bound to another branch"):
        Branch().register(tool)
