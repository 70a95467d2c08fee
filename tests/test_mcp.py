"""`perfaudit mcp` driven by the MCP SDK's own stdio client, as an agent drives it: the tools are listed,
`audit` on a sample script gives the findings `perfaudit run` gives at the same lines (JSON and Markdown),
`explain` a rule's documentation, `fix` the diff without writing the script, `plan` a batch plan (or why
there is none), and a missing script an error result with one clear line."""
from __future__ import annotations

import asyncio
import json
import shutil
import sys

import pytest

from conftest import ROOT, SAMPLES

mcp = pytest.importorskip("mcp", reason="the MCP SDK is installed with .[test] (or .[mcp])")
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from perfaudit import __version__  # noqa: E402


async def _session(work):
    params = StdioServerParameters(command=sys.executable, args=["-m", "perfaudit", "mcp"], cwd=str(work),
                                   env={"PYTHONPATH": str(ROOT)})
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        initialized = await session.initialize()
        assert initialized.serverInfo.name == "perfaudit" and initialized.serverInfo.version == __version__
        tools = {t.name for t in (await session.list_tools()).tools}
        script = str(work / "sync_bad.py")
        audited = await session.call_tool("audit", {"script": script, "warmup": 2, "steps": 3})
        explained = await session.call_tool("explain", {"rule": "SYNC001"})
        fixed = await session.call_tool("fix", {"script": script, "warmup": 2, "steps": 3})
        missing = await session.call_tool("audit", {"script": str(work / "nope.py")})
        planned = await session.call_tool("plan", {"script": script})
        return tools, audited, explained, fixed, missing, planned


def _json(result) -> dict:
    assert not result.isError, result.content
    return json.loads(result.content[0].text)


def test_an_agent_audits_explains_and_fixes_through_the_mcp_server(tmp_path, sample_report):
    shutil.copy(SAMPLES / "sync_bad.py", tmp_path / "sync_bad.py")
    before = (tmp_path / "sync_bad.py").read_text()
    tools, audited, explained, fixed, missing, planned = asyncio.run(_session(tmp_path))
    assert {"audit", "analyze", "explain", "fix", "verify", "plan"} <= tools
    result = _json(audited)
    cli = sample_report("sync_bad.py")  # `perfaudit run` on the same script
    where = {(f["rule"], f["location"]["line"]) for f in result["report"]["findings"] if f.get("location")}
    assert where == {(f["rule"], f["location"]["line"]) for f in cli["findings"] if f.get("location")}
    assert ("SYNC001", 18) in where and "SYNC001" in result["markdown"]
    assert "SYNC001" in explained.content[0].text and not explained.isError
    diff = _json(fixed)["diff"]
    assert diff.startswith("---") and "loss.item()" in diff
    assert (tmp_path / "sync_bad.py").read_text() == before  # nothing written
    assert missing.isError and "script not found" in missing.content[0].text
    plan = _json(planned)   # its batches are made by hand: no DataLoader to scale, and the plan says so
    assert plan["plan"] == "batch" and plan["offered"] is None and "no DataLoader" in plan["why_not"]


async def _bad_calls(work):
    params = StdioServerParameters(command=sys.executable, args=["-m", "perfaudit", "mcp"], cwd=str(work),
                                   env={"PYTHONPATH": str(ROOT)})
    script = str(work / "sync_bad.py")
    calls = [("audit", {"script": script, "steps": 0}), ("audit", {"script": script, "warmup": -1}),
             ("audit", {"script": script, "timeout": -1}), ("audit", {"script": "x" * (1 << 20)}),
             ("audit", {"script": script, "args": ["--lr"] * 10_000}), ("verify", {"script": script, "rounds": 0}),
             ("fix", {"script": script, "steps": -3}), ("plan", {"script": script, "memory_budget_gb": -1.0}),
             ("verify", {"script": script, "plan_file": str(work / "no-plan.json")})]
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        return [await session.call_tool(name, arguments) for name, arguments in calls]


def test_the_mcp_tools_check_their_arguments_as_the_cli_does_and_never_echo_a_huge_one(tmp_path):
    """steps 0, warmup -1, timeout -1, a 1 MB path, a 10,000-item command line, rounds 0, a negative memory
    budget, a plan file that is not there: each an error result of one short line, before anything runs."""
    shutil.copy(SAMPLES / "sync_bad.py", tmp_path / "sync_bad.py")
    results = asyncio.run(_bad_calls(tmp_path))
    words = ("steps", "warmup", "timeout", "script", "args", "rounds", "steps", "memory_budget_gb", "no-plan.json")
    assert len(results) == len(words)
    for result, word in zip(results, words):
        text = result.content[0].text
        assert result.isError and word in text, text[:300]
        assert len(text) < 400 and "\n" not in text.strip(), text[:300]
    assert not list(tmp_path.glob(".perfaudit/runs/*"))  # nothing ran
