"""Tool cassettes: record every tool call of a run, and replay a run without its tools.

``open_tools`` opens a job's toolbox as ``rollout.tool_cassette`` asks; ``Cassette`` records and
answers calls (the matching rule is in ``arft.tools.cassette.cassette``); ``format`` is the JSON
lines file; ``files`` the workspace changes a call made. docs/replay.md is the user's guide.
"""

from arft.tools.cassette.cassette import Cassette, CassetteCounts
from arft.tools.cassette.format import CallRecord, CassetteError, read_cassette, scope
from arft.tools.cassette.tools import CassetteHook, cassette_counts, open_tools

__all__ = ["CallRecord", "Cassette", "CassetteCounts", "CassetteError", "CassetteHook", "cassette_counts",
           "open_tools",
           "read_cassette", "scope"]
