#!/usr/bin/env python3
"""Each backend's name is written once in C++ (its declaration) and once in the build's list.

usage: backend_names.py SOURCE_DIR NAME...

For every NAME (the built backends):
  * the quoted literal "NAME" appears in exactly one C++ file of the library, its tools and its
    bindings (include/, src/, init/, backends/, plugins/, cuda/, bindings/, tools/), outside
    comments: the backend's declaration, backend_traits("NAME", ...) in its own header;
  * the build names it in one list: the root CMakeLists.txt's DISTCOMM_OPTIONAL_BACKENDS (local,
    always built, is its own folder's add_subdirectory), and no CMake file of the build compares
    against it (packaging files, which map names to their packages, aside).
Exits 1 naming every place that breaks this.
"""
import pathlib
import re
import sys

CODE_DIRS = ["include", "src", "init", "backends", "plugins", "cuda", "bindings", "tools"]
CODE_SUFFIXES = {".hpp", ".cpp", ".h", ".cu", ".in"}
# Files that map names to what packages them; they are not where the build decides anything.
PACKAGING = {"cmake/DistCommInstall.cmake", "cmake/DistCommConfig.cmake.in"}


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return "\n".join(re.sub(r"(^|\s)//.*$", "", line) for line in text.split("\n"))


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    root = pathlib.Path(sys.argv[1])
    names = sys.argv[2:]
    problems = []

    code = []
    for d in CODE_DIRS:
        for f in sorted((root / d).rglob("*")):
            if f.is_file() and f.suffix in CODE_SUFFIXES:
                code.append((f.relative_to(root).as_posix(), strip_comments(f.read_text())))
    for name in names:
        literal = '"' + name + '"'
        places = [(path, n + 1) for path, text in code
                  for n, line in enumerate(text.split("\n")) if literal in line]
        declaration = "backends/%s/include/distcomm/backends/%s.hpp" % (name, name)
        if [p for p, _ in places] != [declaration]:
            problems.append("%s is written %d time(s) in C++, expected once, in %s: %s" % (
                literal, len(places), declaration,
                ", ".join("%s:%d" % p for p in places) or "nowhere"))

    cmake_files = [root / "CMakeLists.txt"] + sorted((root / "cmake").glob("*.cmake")) + \
        sorted((root / "cmake").glob("*.in")) + sorted((root / "backends").glob("*/CMakeLists.txt"))
    root_text = (root / "CMakeLists.txt").read_text()
    m = re.search(r"set\(DISTCOMM_OPTIONAL_BACKENDS ([^)]*)\)", root_text)
    listed = m.group(1).split() if m else []
    for name in names:
        if name != "local" and listed.count(name) != 1:
            problems.append("%s is not once in the root CMakeLists.txt's DISTCOMM_OPTIONAL_BACKENDS"
                            % name)
    for f in cmake_files:
        rel = f.relative_to(root).as_posix()
        if rel in PACKAGING:
            continue
        for n, line in enumerate(f.read_text().split("\n"), 1):
            code_part = line.split("#", 1)[0]
            for name in names:
                if re.search(r'STREQUAL\s+"?%s"?(\s|\))' % re.escape(name), code_part) or \
                   re.search(r'"%s"\s+IN_LIST' % re.escape(name), code_part) or \
                   re.search(r"REMOVE_ITEM\s+\S+.*\b%s\b" % re.escape(name), code_part):
                    problems.append("%s:%d compares against the name %s: read its declaration "
                                    "(distcomm_backends_with) instead" % (rel, n, name))
    for p in problems:
        print("backend_names: " + p)
    if problems:
        sys.exit(1)
    print("backend_names: %d backends, each declared once: %s" % (len(names), ", ".join(names)))


if __name__ == "__main__":
    main()
