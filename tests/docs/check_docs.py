#!/usr/bin/env python3
"""Checks that the files, functions and settings the main docs name exist.

For docs/ARCHITECTURE.md, docs/EXTENDING.md and README.md:
  * a path (in backticks, in a Markdown link, or written out in the text with a known
    extension) names a file or folder of the repository; header paths may be relative to an
    include folder (`distcomm/init.hpp`, `registry/backends.hpp`, `strategy/ring.hpp`);
  * every `DISTCOMM_*` name in backticks is a setting of src/settings.cpp or a CMake option or
    variable of the build;
  * every `name()` or `ns::name(...)` in backticks is declared somewhere in the sources;
and docs/ARCHITECTURE.md, the map, stays at most 250 lines.

Prints each missing name with its file and line; exits 1 when any is missing.
Usage: check_docs.py [repository root]   (default: two folders above this script)
"""

import os
import re
import sys

DOCS = ["docs/ARCHITECTURE.md", "docs/EXTENDING.md", "README.md"]
MAP = "docs/ARCHITECTURE.md"
MAP_MAX_LINES = 250

PATH_EXTENSIONS = (".hpp", ".cpp", ".h", ".md", ".sh", ".py", ".txt", ".cmake", ".in")
# Where a function named in the docs must be declared (the build's own functions, such as
# distcomm_add_backend(), in cmake/ and the CMakeLists.txt files).
SOURCE_FOLDERS = ["include", "src", "backends", "plugins", "cuda", "init", "bindings", "tools",
                  "cmake"]
SOURCE_SUFFIXES = (".hpp", ".cpp", ".h", ".cu", ".cuh", ".py", ".in", ".cmake", "CMakeLists.txt")

# Names that look like paths or calls but are neither a file of the repository nor a function
# declared in it. Keep this short, and say why each is here.
ALLOWED = {
    # Written by the build into the build tree (cmake/built.hpp.in).
    "distcomm/backends/built.hpp",
    # The build tree and what it holds (scripts/test.sh builds there).
    "build/",
    # The system's shared-memory folder, which the shm backend uses.
    "/dev/shm",
    # System calls, declared by the system's headers.
    "mprotect()",
}
# Prefixes of build outputs: programs and files that exist once the project is built.
ALLOWED_PREFIXES = ("build/", "figures/", "/")


def repo_root():
    if len(sys.argv) > 1:
        return os.path.abspath(sys.argv[1])
    return os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def include_dirs(root):
    """The folders a header path may be relative to."""
    dirs = ["include", "plugins/include", "plugins/loader/include", "cuda/include",
            "init/include"]
    backends = os.path.join(root, "backends")
    if os.path.isdir(backends):
        for name in sorted(os.listdir(backends)):
            dirs.append(os.path.join("backends", name, "include"))
    out = []
    for d in dirs:
        out.append(d)
        out.append(os.path.join(d, "distcomm"))
    return out


def strip_fences(text):
    """The text with fenced code blocks blanked out (line numbers kept)."""
    out = []
    fenced = False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else line)
    return "\n".join(out)


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def inline_code(text):
    """(offset, content) of every `inline code` span, which may wrap onto the next line."""
    for m in re.finditer(r"(?<!`)`([^`]+?)`(?!`)", text):
        yield m.start(), m.group(1).replace("\n", " ").strip()


def has_placeholder(s):
    return "<" in s or "*" in s or "..." in s


class Checker:
    def __init__(self, root):
        self.root = root
        self.includes = include_dirs(root)
        self.missing = []
        self.settings = None
        self.sources = None
        self.paths = None

    def report(self, doc, line, what, name):
        self.missing.append(f"{doc}:{line}: {what} `{name}` not found")

    # ---- paths ---------------------------------------------------------------------------
    def repo_paths(self):
        """Every file and folder of the repository, relative to its root (build trees aside)."""
        if self.paths is None:
            self.paths = set()
            for folder, dirs, files in os.walk(self.root):
                rel = os.path.relpath(folder, self.root)
                dirs[:] = [d for d in dirs if not (rel == "." and (d.startswith("build")
                                                                   or d.startswith(".")))]
                for name in dirs + files:
                    self.paths.add(os.path.normpath(os.path.join(rel, name)))
        return self.paths

    def path_exists(self, path, doc_dir):
        path = path.rstrip("/") or path
        candidates = [path, os.path.join(doc_dir, path)]
        candidates += [os.path.join(d, path) for d in self.includes]
        if any(os.path.exists(os.path.join(self.root, os.path.normpath(c))) for c in candidates):
            return True
        first = path.split("/")[0]
        if os.path.exists(os.path.join(self.root, first)) or first == "..":
            return False  # a path from the top of the repository: it must be exactly there
        # A file name alone, or a path within a folder the text is about (`loader/` of plugins/,
        # `algorithms/common.hpp` of strategy/): somewhere in the repository.
        tail = os.sep + os.path.normpath(path)
        return any(p == path or p.endswith(tail) for p in self.repo_paths())

    def check_path(self, doc, line, path, doc_dir):
        if path in ALLOWED or path.startswith(ALLOWED_PREFIXES) or has_placeholder(path):
            return
        if not self.path_exists(path, doc_dir):
            self.report(doc, line, "path", path)

    @staticmethod
    def looks_like_path(s):
        if " " in s or "(" in s or "=" in s or ":" in s or "|" in s or "%" in s:
            return False
        if re.fullmatch(r"[0-9a-fA-F:.]+/\d+", s):  # a subnet (10.1.0.0/24)
            return False
        return "/" in s or s.endswith(PATH_EXTENSIONS)

    # ---- settings ------------------------------------------------------------------------
    def known_settings(self):
        if self.settings is None:
            texts = []
            for name in ("settings.cpp", "config.cpp"):
                source = os.path.join(self.root, "src", name)
                if os.path.exists(source):
                    texts.append(open(source, encoding="utf-8", errors="replace").read())
            for folder, _, files in os.walk(self.root):
                rel = os.path.relpath(folder, self.root)
                if rel.split(os.sep)[0] in ("build", ".git") or rel.startswith("build"):
                    continue
                for f in files:
                    if f == "CMakeLists.txt" or f.endswith(".cmake") or f.endswith(".cmake.in"):
                        texts.append(open(os.path.join(folder, f), encoding="utf-8",
                                          errors="replace").read())
            self.settings = set(re.findall(r"DISTCOMM_[A-Z0-9_]+", "\n".join(texts)))
            # Macros the library defines (DISTCOMM_EXPORT_BACKEND_V1, DISTCOMM_BUILT_*): names a
            # reader meets in the code, not settings, but real.
            self.settings |= set(re.findall(r"#\s*define\s+(DISTCOMM_[A-Z0-9_]+)",
                                            self.source_text()))
        return self.settings

    # ---- functions -----------------------------------------------------------------------
    def source_text(self):
        if self.sources is None:
            parts = []
            top_cmake = os.path.join(self.root, "CMakeLists.txt")
            if os.path.exists(top_cmake):
                parts.append(open(top_cmake, encoding="utf-8", errors="replace").read())
            for top in SOURCE_FOLDERS:
                base = os.path.join(self.root, top)
                for folder, _, files in os.walk(base):
                    for f in files:
                        if f.endswith(SOURCE_SUFFIXES):
                            parts.append(open(os.path.join(folder, f), encoding="utf-8",
                                              errors="replace").read())
            self.sources = "\n".join(parts)
        return self.sources

    def declared(self, name):
        return re.search(r"\b" + re.escape(name) + r"\s*(<[^;{}()]*>)?\s*\(",
                         self.source_text()) is not None

    # ---- one document --------------------------------------------------------------------
    def check_doc(self, doc):
        path = os.path.join(self.root, doc)
        if not os.path.exists(path):
            self.report(doc, 0, "document", doc)
            return
        raw = open(path, encoding="utf-8").read()
        text = strip_fences(raw)
        doc_dir = os.path.dirname(doc)
        code_spans = []

        for offset, code in inline_code(text):
            line = line_of(text, offset)
            code_spans.append((offset, offset + len(code) + 2))
            inner = code[1:-1] if code.startswith("<") and code.endswith(">") else code
            if self.looks_like_path(inner):
                self.check_path(doc, line, inner, "")
            for setting in re.findall(r"DISTCOMM_[A-Z0-9_]+(?![A-Z0-9_<])", code):
                if re.search(re.escape(setting) + r"<", code):
                    continue  # DISTCOMM_WITH_<NAME>: a family of names
                if setting not in self.known_settings():
                    self.report(doc, line, "setting", setting)
            # name(...) anywhere in the span; "name (...)" only where the span starts with it
            # (a call wrapped onto the next line), not in quoted messages ("has i32 (1st ...").
            calls = re.findall(r"(?:^|[^\w:.>])((?:\w+::)*(\w+))(?:<[^()]*>)?\(", code)
            calls += re.findall(r"^((?:\w+::)*(\w+))(?:<[^()]*>)?\s+\(", code)
            for full, name in calls:
                if full + "()" in ALLOWED or name in ("if", "for", "while", "return", "sizeof"):
                    continue
                if not self.declared(name):
                    self.report(doc, line, "function", full + "()")

        # Markdown links to files of the repository, relative to the document.
        for m in re.finditer(r"\]\(([^)\s#]+)(#[^)]*)?\)", text):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue
            if not self.path_exists(target, doc_dir):
                self.report(doc, line_of(text, m.start()), "link", target)

        # Paths written out in the text (outside code spans): folder/file.ext.
        prose = list(text)
        for a, b in code_spans:
            for i in range(a, min(b, len(prose))):
                if prose[i] != "\n":
                    prose[i] = " "
        prose = "".join(prose)
        prose = re.sub(r"\]\([^)]*\)", lambda m: " " * len(m.group(0)), prose)
        ext = "|".join(e.lstrip(".") for e in PATH_EXTENSIONS)
        for m in re.finditer(r"(?<![\w/.<-])((?:[\w.-]+/)+[\w.-]+\.(?:" + ext + r"))\b", prose):
            self.check_path(doc, line_of(prose, m.start()), m.group(1), doc_dir)

        if doc == MAP:
            lines = raw.count("\n") + (0 if raw.endswith("\n") else 1)
            if lines > MAP_MAX_LINES:
                self.missing.append(
                    f"{doc}: {lines} lines; the map must stay at most {MAP_MAX_LINES} "
                    "(move detail to the topical docs)")


def main():
    root = repo_root()
    checker = Checker(root)
    for doc in DOCS:
        checker.check_doc(doc)
    if checker.missing:
        for m in checker.missing:
            print(m)
        print(f"check_docs: {len(checker.missing)} name(s) in the docs do not exist")
        return 1
    print(f"check_docs: every file, function and setting named in {', '.join(DOCS)} exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
