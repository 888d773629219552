"""Reading a YAML file someone handed us, with bounded cost: text only, a node budget after aliases.

Owns the two checks every YAML input of the project passes before it is parsed into objects (the
training config, `--set` values, hardware profiles): the file must be UTF-8 text without control
characters (binary garbage used to end in a traceback), and the document, with every alias expanded,
must stay under `MAX_NODES` nodes (nine levels of nine aliases is 387 million nodes: validation ran for
minutes at gigabytes and the error message quoting it was 226 MB). The loader passed in does the
construction itself (SafeLoader or a subclass); this module never constructs arbitrary objects. It is
torch-free and imports nothing from `launcher`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

# A config or profile has a few hundred nodes; an honest one never comes near this.
MAX_NODES = 20_000
MAX_BYTES = 1 << 20  # 1 MiB: the largest config is a few KB
# Control characters other than tab, newline and carriage return: not text a person wrote.
_BINARY = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class BadYaml(ValueError):
    """A YAML input refused before construction: `problem` is one line, `fix` what to do."""

    def __init__(self, problem: str, fix: str):
        self.problem, self.fix = problem, fix
        super().__init__(f"{problem}. Fix: {fix}")


def read_text(path: str | Path) -> str:
    """The file's text, or BadYaml when it is too large, not UTF-8 or holds control characters.
    OSError (missing, unreadable) is the caller's to word."""
    p = Path(path)
    with open(p, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise BadYaml(f"larger than {MAX_BYTES // 1024} KiB", "pass a YAML config of a few KB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadYaml(
            f"not a text file (byte 0x{data[e.start]:02x} at offset {e.start} is not UTF-8)",
            "pass a YAML text file",
        ) from None
    check_text(text)
    return text


def check_text(text: str) -> None:
    """BadYaml when `text` holds a control character other than tab and line ends."""
    m = _BINARY.search(text)
    if m is not None:
        line = text.count("\n", 0, m.start()) + 1
        raise BadYaml(
            f"not a text file (control character 0x{ord(m.group()):02x} on line {line})",
            "pass a YAML text file",
        )


def _expanded_size(root: yaml.Node, budget: int) -> int:
    """Nodes of the document with every alias expanded, counting stops past `budget`.

    An alias is the same node object as its anchor in the composed graph, so sizes are memoised by
    identity: the cost is linear in the distinct nodes, whatever the expansion."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node, depth: int) -> int:
        if depth > 100:  # deeper than any config; also keeps the recursion bounded
            return budget + 1
        key = id(node)
        if key in sizes:
            return sizes[key]
        n = 1
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                n += size(k, depth + 1) + size(v, depth + 1)
                if n > budget:
                    break
        elif isinstance(node, yaml.SequenceNode):
            for v in node.value:
                n += size(v, depth + 1)
                if n > budget:
                    break
        sizes[key] = n = min(n, budget + 1)
        return n

    return size(root, 0)


def load(text: str, loader: type[yaml.SafeLoader] = yaml.SafeLoader, max_nodes: int = MAX_NODES) -> Any:
    """Parse one YAML document with `loader` (a SafeLoader), refusing an alias expansion past
    `max_nodes` nodes with BadYaml before anything is constructed. yaml.YAMLError for bad syntax."""
    check_text(text)
    ld = loader(text)
    try:
        try:
            node = ld.get_single_node()
        except RecursionError:
            raise BadYaml("nested too deeply", "a config nests a few levels; flatten it") from None
        if node is None:
            return None
        if _expanded_size(node, max_nodes) > max_nodes:
            raise BadYaml(
                f"expands to more than {max_nodes} nodes once its aliases (*name) are resolved",
                "write the values out, or use fewer nested aliases",
            )
        return ld.construct_document(node)
    finally:
        ld.dispose()
