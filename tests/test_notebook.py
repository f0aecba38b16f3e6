"""The example notebook runs headless, top to bottom, on an asyncio kernel."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parent.parent / "examples" / "compose_toolsets.ipynb"


def test_notebook_executes_without_cell_errors(tmp_path: Path) -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()  # raises CellExecutionError on the first failing cell
    outputs = "\n".join(
        output.get("text", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
    )
    assert "API_KEY" not in outputs
    assert "greet() now uses an f-string" in outputs
    assert "editor -> False" in outputs  # the unread edit was refused
    assert 'return f"Hello, {name}!"' in outputs
