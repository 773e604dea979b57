#!/usr/bin/env python3
"""The plugin's rooms (docs/ARCHITECTURE.md): checks the layering and draws the picture.

A room is a folder of plugin/src (or plugin/testing) with a CMakeLists.txt that makes one library,
zipccl_plugin_<room>. The rooms a room may use are the ones its library links (CMake's
target_link_libraries, followed transitively): that graph is the architecture, and this script holds
the code to it.

  check   (default) fails, naming the file and line, when
          - a source file under plugin/src or plugin/testing lies in no room, or a room's folder has
            a source its CMakeLists.txt does not build;
          - an #include "..." reaches into a room its own room does not link (an arrow the wrong way),
            or into the test doubles from a product room;
          - the room links form a cycle;
          - docs/ARCHITECTURE.md's room picture is not the one `draw` prints;
          - tools/ is not one folder per kind: a C or C++ source of the command lies loose in tools/
            (its place is tools/zipccl/, whose CMakeLists.txt the picture reads), or that folder's
            CMakeLists.txt is missing.
  draw    prints the picture, generated from the CMake links.

The root header transport.h (the transports' interface) may be included by every room but common.
"""
import argparse
import os
import re
import sys

SOURCE_EXT = (".cpp", ".cc", ".c", ".cu", ".h", ".cuh")
COMPILED_EXT = (".cpp", ".cc", ".c", ".cu")
# Sources built by another list than their room's (the glibc baseline's compat symbols).
BUILT_ELSEWHERE = {"plugin/src/common/glibc_compat.c": "tools/cmake/glibc_baseline.cmake"}
# Includes that are no plugin header: generated at build time.
GENERATED = {"zipccl_git_commit.h"}
ROOT_HEADERS = {"transport.h"}
PICTURE_BEGIN = "<!-- plugin-rooms:begin (generated: tools/plugin_rooms.py draw) -->"
PICTURE_END = "<!-- plugin-rooms:end -->"
# The `zipccl` command's sources and build: tools/ keeps one folder per kind (zipccl/, capi/, python/,
# cmake/) and, loose, only the scripts (and flowcap_shim.c, which flowcap_bench.sh compiles).
TOOL_CMAKE = os.path.join("tools", "zipccl", "CMakeLists.txt")
SCRIPT_SOURCES = {"flowcap_shim.c"}
# What each room is, for the picture (one line).
ROLE = {
    "abi": "the exported net tables and their guard; tuner, profiler, CollNet passed through; picks a transport",
    "layer": "the compressing layer: SendComm/RecvComm, frames, policy, stats, codec workers",
    "socket": "TCP transport (streams, wire format) and interface selection",
    "rdma": "RDMA transport: protocol over the Fabric seam, verbs, device selection",
    "inner": "another NCCL net plugin as transport",
    "fabric": "what the node's network is and what zipccl does there (wrap, TCP, step aside)",
    "gpu": "GPU path: device operations (CUDA), per-comm channel, landing kernel",
    "common": "settings registry, units, logger, version",
    "testing": "test doubles: GPU emulation, loopback fabric (never in the shipped .so)",
}


def room_dirs(root):
    """{room: folder relative to root} for plugin/src/* and plugin/testing."""
    rooms = {}
    src = os.path.join(root, "plugin", "src")
    for name in sorted(os.listdir(src)):
        if os.path.isdir(os.path.join(src, name)):
            rooms[name] = os.path.join("plugin", "src", name)
    if os.path.isdir(os.path.join(root, "plugin", "testing")):
        rooms["testing"] = os.path.join("plugin", "testing")
    return rooms


def strip_cmake_comments(text):
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


def cmake_links(root, rooms, problems):
    """{room: set of rooms its library links directly}, and each room's CMake text."""
    links, texts = {}, {}
    for room, folder in rooms.items():
        path = os.path.join(root, folder, "CMakeLists.txt")
        if not os.path.exists(path):
            problems.append(f"{folder}/: a folder of the plugin without a CMakeLists.txt (no room)")
            continue
        text = strip_cmake_comments(open(path).read())
        texts[room] = text
        if not re.search(r"zipccl_plugin_room\(\s*zipccl_plugin_%s\b" % re.escape(room), text):
            problems.append(f"{folder}/CMakeLists.txt: makes no library zipccl_plugin_{room}")
        deps = set()
        for m in re.finditer(r"target_link_libraries\(\s*(\w+)([^)]*)\)", text):
            if m.group(1) not in (f"zipccl_plugin_{room}", "zipccl_version"):
                continue
            for tok in m.group(2).split():
                if tok.startswith("zipccl_plugin_"):
                    deps.add(tok[len("zipccl_plugin_"):])
                elif tok == "zipccl_version":
                    deps.add("common")
        deps.discard(room)
        links[room] = deps
    return links, texts


def closure(links):
    out = {}
    for room in links:
        seen, todo = set(), list(links[room])
        while todo:
            r = todo.pop()
            if r not in seen:
                seen.add(r)
                todo.extend(links.get(r, ()))
        out[room] = seen
    return out


def source_files(root, rooms):
    for base in (os.path.join("plugin", "src"), os.path.join("plugin", "testing")):
        for dirpath, _, files in os.walk(os.path.join(root, base)):
            for f in sorted(files):
                if f.endswith(SOURCE_EXT):
                    yield os.path.relpath(os.path.join(dirpath, f), root)


def room_of(rel, rooms):
    for room, folder in rooms.items():
        if rel.startswith(folder + os.sep):
            return room
    return None


def check(root):
    problems = []
    rooms = room_dirs(root)
    links, texts = cmake_links(root, rooms, problems)
    reach = closure(links)
    for room, r in reach.items():
        if room in r:
            problems.append(f"room {room}: its library links back to itself (a cycle of rooms)")
    for rel in source_files(root, rooms):
        room = room_of(rel, rooms)
        name = os.path.basename(rel)
        if room is None:
            if rel.replace(os.sep, "/") != "plugin/src/transport.h":
                problems.append(f"{rel}: belongs to no room (put it in a folder of plugin/src)")
            room = "<root>"
        elif rel.endswith(COMPILED_EXT):
            owner = BUILT_ELSEWHERE.get(rel.replace(os.sep, "/"))
            if owner:
                if name not in open(os.path.join(root, owner)).read():
                    problems.append(f"{rel}: {owner} no longer builds it")
            elif not re.search(r"(^|[\s(])%s([\s)]|$)" % re.escape(name), texts.get(room, "")):
                problems.append(f"{rel}: not built by {rooms[room]}/CMakeLists.txt")
        for lineno, line in enumerate(open(os.path.join(root, rel), errors="replace"), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m:
                continue
            inc = m.group(1)
            first = inc.split("/", 1)[0]
            where = f"{rel}:{lineno}: #include \"{inc}\""
            if inc in GENERATED or first in ("nccl", "zipccl"):
                continue  # NCCL's ABI headers (plugin/nccl) and the codec's public headers
            if inc in ROOT_HEADERS:
                if room == "common":
                    problems.append(f"{where}: common is below the transports' interface")
                continue
            if "/" not in inc or first not in rooms:
                problems.append(f"{where}: names no room (write \"<room>/{os.path.basename(inc)}\")")
                continue
            if first == room:
                continue
            if room == "<root>":
                problems.append(f"{where}: transport.h includes only NCCL's headers")
            elif first == "testing":
                problems.append(f"{where}: a product room uses the test doubles")
            elif first not in reach.get(room, ()):
                problems.append(
                    f"{where}: room {room} does not link {first} (its CMake links: "
                    f"{', '.join(sorted(links.get(room, ()))) or 'none'}) - an arrow the wrong way")
    if not os.path.exists(os.path.join(root, TOOL_CMAKE)):
        problems.append(f"{TOOL_CMAKE}: missing (the `zipccl` command's build, read for the picture)")
    for name in sorted(os.listdir(os.path.join(root, "tools"))):
        if name.endswith(SOURCE_EXT) and name not in SCRIPT_SOURCES:
            problems.append(f"tools/{name}: a source loose in tools/; the command's go in tools/zipccl/ "
                            "(tools/ holds a folder per kind, and the scripts)")
    arch = os.path.join(root, "docs", "ARCHITECTURE.md")
    text = open(arch).read() if os.path.exists(arch) else ""
    if PICTURE_BEGIN not in text or PICTURE_END not in text:
        problems.append("docs/ARCHITECTURE.md: no room picture (markers missing); run tools/plugin_rooms.py draw")
    else:
        shown = text.split(PICTURE_BEGIN, 1)[1].split(PICTURE_END, 1)[0]
        if shown.strip() != draw(root, rooms, links).strip():
            problems.append("docs/ARCHITECTURE.md: the room picture differs from the CMake links; "
                            "paste the output of tools/plugin_rooms.py draw between its markers")
    return problems


def consumers(root):
    """[(binary, [rooms])] for the shared objects (plugin/CMakeLists.txt's zipccl_plugin_shared) and the
    tool (TOOL_CMAKE), from their CMake lists."""
    out = []
    text = strip_cmake_comments(open(os.path.join(root, "plugin", "CMakeLists.txt")).read())
    for m in re.finditer(r"zipccl_plugin_shared\(\s*([\w-]+)\s+([^)]*)\)", text):
        rooms = [t[len("zipccl_plugin_"):] for t in m.group(2).split() if t.startswith("zipccl_plugin_")]
        out.append((f"lib{m.group(1)}.so", rooms))
    tools = os.path.join(root, TOOL_CMAKE)
    if os.path.exists(tools):  # check() reports it missing
        text = strip_cmake_comments(open(tools).read())
        rooms = sorted({m.group(1) for m in re.finditer(r"\bzipccl_plugin_(\w+)", text)})
        if rooms:
            out.append(("zipccl (the tool, tools/zipccl)", rooms))
    return out


def draw(root, rooms, links):
    """Rooms top to bottom (each below every room that links it), with their direct arrows (those not
    implied by a longer path) and role."""
    reach = closure(links)
    depth = {}

    def height(r, stack=()):
        if r in depth:
            return depth[r]
        if r in stack:
            return 0
        depth[r] = 1 + max((height(d, stack + (r,)) for d in links.get(r, ())), default=-1)
        return depth[r]

    for r in links:
        height(r)
    order = sorted(links, key=lambda r: (-depth[r], r == "testing", r))
    lines = ["```"]
    for binary, used in consumers(root):
        lines.append(f"{binary} -> {', '.join(used)}")
    lines.append("")
    width = max(len(r) for r in order)
    for r in order:
        direct = sorted(d for d in links[r] if not any(d in reach[o] for o in links[r] if o != d))
        arrow = "-> " + ", ".join(direct) if direct else ""
        lines.append(f"  {r:<{width}}  {arrow:<22} {ROLE.get(r, '')}".rstrip())
    lines.append("")
    lines.append("  transport.h (plugin/src): the transports' interface; every room but common may use it")
    lines.append("```")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", nargs="?", default="check", choices=["check", "draw"])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    if args.command == "draw":
        problems = []
        rooms = room_dirs(root)
        links, _ = cmake_links(root, rooms, problems)
        sys.stdout.write(draw(root, rooms, links))
        return 0
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"plugin_rooms: {len(problems)} problem(s)")
        return 1
    print(f"plugin_rooms: {len(room_dirs(root))} rooms, every source in one, every include downward")
    return 0


if __name__ == "__main__":
    sys.exit(main())
