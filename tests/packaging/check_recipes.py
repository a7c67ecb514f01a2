#!/usr/bin/env python3
"""Static checks of DistComm's package recipes against its CMake build (label "packaging").

Neither vcpkg nor Conan is installed where the tests run, so the recipes are checked for what can
be known without them: that they parse, carry the required fields, name exactly the components
DistComm's CMake package has (cmake/DistCommInstall.cmake: DISTCOMM_KNOWN_COMPONENTS), switch
backends with cache options the CMake build defines, and mention only targets that exist. With
--prefix (an installed DistComm) the names are also checked against the installed export.

usage: check_recipes.py --source-dir DIR [--prefix INSTALLED_PREFIX]
Python 3 standard library only.
"""

import argparse
import ast
import json
import pathlib
import re
import sys

FAILURES = []

# Components every build has (no dependency, no switch): no vcpkg feature, no Conan option, no
# pkg-config module of their own.
ALWAYS_BUILT = ("core", "local", "plugin_abi", "plugin")


def check(ok, what, detail=""):
    """Records one check; prints it with its outcome."""
    print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f": {detail}" if detail and not ok else ""))
    if not ok:
        FAILURES.append(what)
    return ok


def cmake_facts(src):
    """What the CMake build says: version, known components, install dir, cache options."""
    root = (src / "CMakeLists.txt").read_text()
    install = (src / "cmake" / "DistCommInstall.cmake").read_text()
    version = re.search(r"project\(DistComm\s+VERSION\s+([0-9.]+)", root)
    known = re.search(r"set\(DISTCOMM_KNOWN_COMPONENTS\s+([^)]*)\)", install)
    cmakedir = re.search(r'set\(DISTCOMM_INSTALL_CMAKEDIR\s+"\$\{CMAKE_INSTALL_LIBDIR\}/([^"]+)"',
                         install)
    if not (version and known and cmakedir):
        sys.exit("check_recipes.py: cannot read the version, DISTCOMM_KNOWN_COMPONENTS or "
                 "DISTCOMM_INSTALL_CMAKEDIR from the CMake sources")
    # Every cache variable or option the build defines, wherever it is defined.
    cmake_files = [src / "CMakeLists.txt", *sorted((src / "cmake").glob("*.cmake")),
                   *sorted((src / "backends").glob("*/CMakeLists.txt")),
                   src / "tools" / "CMakeLists.txt"]
    text = "\n".join(f.read_text() for f in cmake_files if f.is_file())
    defined = set(re.findall(r"\boption\(\s*(DISTCOMM_\w+)", text))
    defined |= set(re.findall(r"\bset\(\s*(DISTCOMM_\w+)\s+[^)]*\bCACHE\b", text))
    # ... including those a foreach() defines, e.g. set(DISTCOMM_WITH_${b} ... CACHE ...).
    for var, items, body in re.findall(r"\bforeach\(\s*(\w+)\s+(?:IN\s+ITEMS\s+)?([^)]*)\)"
                                       r"(.*?)\bendforeach\(", text, re.DOTALL):
        for head, tail in re.findall(rf"\bset\(\s*(DISTCOMM_\w*)\$\{{{var}\}}(\w*)\s+[^)]*"
                                     r"\bCACHE\b", body):
            defined |= {f"{head}{item}{tail}" for item in items.split()}
    # The folders the root CMakeLists adds unconditionally or for a library build.
    subdirs = set(re.findall(r"add_subdirectory\(\s*([\w/.${}]+)", root))
    return {
        "version": version.group(1),
        "components": known.group(1).split(),
        "cmakedir": "lib/" + cmakedir.group(1),
        "cache_options": defined,
        "subdirs": subdirs,
    }


def installed_facts(prefix):
    """Targets in the installed export, built components, installed pkg-config modules."""
    targets_files = sorted(prefix.glob("**/DistCommTargets.cmake"))
    config_files = sorted(prefix.glob("**/DistCommConfig.cmake"))
    if not (check(len(targets_files) == 1, "the prefix has one DistCommTargets.cmake", str(prefix))
            and check(len(config_files) == 1, "the prefix has one DistCommConfig.cmake")):
        return None
    targets = set(re.findall(r"add_library\(DistComm::(\w+)\s", targets_files[0].read_text()))
    built = re.search(r'set\(DistComm_BUILT_COMPONENTS "([^"]*)"\)', config_files[0].read_text())
    modules = {p.stem for p in prefix.glob("**/pkgconfig/*.pc")}
    return {"targets": targets, "built": built.group(1).split(";") if built else [],
            "modules": modules}


def check_vcpkg(src, facts, installed):
    port = src / "ports" / "distcomm"
    backends = [c for c in facts["components"] if c not in ALWAYS_BUILT]
    try:
        manifest = json.loads((port / "vcpkg.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        check(False, "ports/distcomm/vcpkg.json is valid JSON", str(e))
        return
    check(True, "ports/distcomm/vcpkg.json is valid JSON")
    for field in ("name", "version", "description", "license", "dependencies", "features"):
        check(field in manifest, f"vcpkg.json has '{field}'")
    check(manifest.get("name") == "distcomm", "vcpkg.json name is 'distcomm'",
          repr(manifest.get("name")))
    check(manifest.get("version") == facts["version"],
          "vcpkg.json version is the project's", f"{manifest.get('version')} != {facts['version']}")
    deps = {d if isinstance(d, str) else d.get("name"): d for d in manifest.get("dependencies", [])}
    for dep in ("vcpkg-cmake", "vcpkg-cmake-config"):
        check(isinstance(deps.get(dep), dict) and deps[dep].get("host") is True,
              f"vcpkg.json depends on {dep} as a host tool")
    for dep in ("openssl", "nlohmann-json", "cli11"):
        check(dep in deps, f"vcpkg.json depends on {dep}")
    features = manifest.get("features", {})
    check(sorted(features) == sorted(backends),
          "vcpkg.json features are the CMake components less those always built",
          f"features {sorted(features)}, components {sorted(backends)}")
    for name, feature in features.items():
        check(bool(feature.get("description")), f"vcpkg feature '{name}' has a description")
    for name, dep in (("mpi", "mpi"), ("gloo", "gloo")):
        if name in features:
            check(dep in features[name].get("dependencies", []),
                  f"vcpkg feature '{name}' depends on vcpkg's '{dep}' port")

    portfile = (port / "portfile.cmake").read_text()
    code = "\n".join(line.split("#", 1)[0] for line in portfile.splitlines())
    mapping = dict(re.findall(r"^\s*(\w+)\s+(DISTCOMM_WITH_\w+)\s*$", code, re.MULTILINE))
    check(mapping == {b: f"DISTCOMM_WITH_{b.upper()}" for b in backends},
          "portfile maps each feature to DISTCOMM_WITH_<FEATURE> in vcpkg_check_features",
          str(mapping))
    for call in ("vcpkg_check_features", "vcpkg_cmake_configure", "vcpkg_cmake_install",
                 "vcpkg_fixup_pkgconfig", "vcpkg_install_copyright"):
        check(re.search(rf"\b{call}\(", code) is not None, f"portfile calls {call}()")
    fixup = re.search(r"vcpkg_cmake_config_fixup\(([^)]*)\)", code)
    check(fixup is not None and "PACKAGE_NAME DistComm" in fixup.group(1)
          and f"CONFIG_PATH {facts['cmakedir']}" in fixup.group(1),
          f"portfile fixes up the CMake package: PACKAGE_NAME DistComm CONFIG_PATH "
          f"{facts['cmakedir']}", fixup.group(0) if fixup else "no vcpkg_cmake_config_fixup")
    check_cache_options(src, "portfile", set(re.findall(r"-D(DISTCOMM_\w+)=", code))
                        | set(mapping.values()), facts)

    usage = (port / "usage").read_text()
    check_targets("vcpkg usage", usage, facts, installed)
    check_targets("portfile", portfile, facts, installed, required=False)
    mentioned = set(re.findall(r"\b(distcomm(?:-\w+)?)\b(?!::)", usage)) - {"distcomm-run"}
    modules = {"distcomm"} | {f"distcomm-{b}" for b in backends}
    # A module is named in the usage only if a template for it exists (nccl's is added with it).
    templates = {p.name[:-len(".pc.in")] for p in (src / "cmake").glob("*.pc.in")}
    check(mentioned <= templates and mentioned <= modules,
          "the pkg-config modules the usage names have templates in cmake/",
          f"named {sorted(mentioned)}, templates {sorted(templates)}")
    if installed:
        expected = {"distcomm"} | {f"distcomm-{c}" for c in installed["built"]
                                   if c not in ALWAYS_BUILT}
        check(expected <= installed["modules"],
              "every built component has its pkg-config module installed",
              f"missing {sorted(expected - installed['modules'])}")


def check_cache_options(src, who, options, facts):
    missing = sorted(options - facts["cache_options"])
    check(not missing, f"the cache options the {who} sets are defined by the CMake build",
          f"{', '.join(missing)} not defined (option()/set(... CACHE) in CMakeLists.txt, "
          "cmake/*.cmake or backends/*/CMakeLists.txt)")


def check_targets(who, text, facts, installed, required=True):
    """Every DistComm::<name> in text is a known component or the umbrella (and, with an
    installed tree, exported there or a component this installation was not built with).
    required: text must name at least one."""
    names = set(re.findall(r"DistComm::(\w+)", text))
    known = set(facts["components"]) | {"DistComm"}
    check((names or not required) and names <= known,
          f"the {who} names only DistComm targets that exist",
          f"unknown: {sorted(names - known)}" if names else "names no DistComm:: target")
    if installed:
        not_built = set(facts["components"]) - set(installed["built"])
        stray = sorted(names - installed["targets"] - not_built)
        check(not stray, f"the {who}'s targets are in the installed export",
              f"{stray} not exported (exported: {sorted(installed['targets'])})")


def literal(node):
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError):
        return None


def check_conan(src, facts, installed):
    backends = [c for c in facts["components"] if c not in ALWAYS_BUILT]
    path = src / "conanfile.py"
    try:
        tree = ast.parse(path.read_text(), str(path))
    except SyntaxError as e:
        check(False, "conanfile.py parses", str(e))
        return
    check(True, "conanfile.py parses")
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)
               and any(getattr(b, "id", None) == "ConanFile" for b in n.bases)]
    if not check(len(classes) == 1, "conanfile.py has one ConanFile class"):
        return
    cls = classes[0]
    attrs = {t.id: n.value for n in cls.body if isinstance(n, ast.Assign)
             for t in n.targets if isinstance(t, ast.Name)}
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    check(literal(attrs.get("name")) == "distcomm", "the recipe's name is 'distcomm'")
    check("set_version" in methods or literal(attrs.get("version")) == facts["version"],
          "the recipe's version is the project's (set_version reads CMakeLists.txt)")
    options = literal(attrs.get("options")) or {}
    defaults = literal(attrs.get("default_options")) or {}
    expected = {"shared", "fPIC"} | {f"with_{b}" for b in backends}
    check(set(options) == expected, "the recipe's options are shared, fPIC and with_<backend>",
          f"options {sorted(options)}, expected {sorted(expected)}")
    check(set(defaults) == set(options), "every option has a default",
          f"defaults {sorted(defaults)}")

    module_level = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign)
                    for t in n.targets if isinstance(t, ast.Name)}
    check(list(literal(module_level.get("_BACKENDS")) or ()) == backends,
          "the recipe's _BACKENDS (one DISTCOMM_WITH_<BACKEND> each) are the CMake backends",
          f"{literal(module_level.get('_BACKENDS'))} != {backends}")
    generate = ast.get_source_segment(path.read_text(), methods.get("generate")) or ""
    check('f"DISTCOMM_WITH_{backend.upper()}"' in generate,
          "generate() passes DISTCOMM_WITH_<BACKEND> for each of _BACKENDS")
    passed = set(re.findall(r'cache_variables\["(DISTCOMM_\w+)"\]', generate))
    check_cache_options(src, "Conan recipe", passed | {f"DISTCOMM_WITH_{b.upper()}"
                                                       for b in backends}, facts)

    requires = " ".join(literal(c.args[0]) or "" for c in ast.walk(methods.get("requirements",
                                                                               cls))
                        if isinstance(c, ast.Call) and getattr(c.func, "attr", "") == "requires"
                        and c.args)
    for dep in ("openssl/", "nlohmann_json/", "cli11/"):
        check(dep in requires, f"the recipe requires {dep.rstrip('/')}")

    # Components: every self.cpp_info.components["x"] and each one's cmake_target_name.
    info = methods.get("package_info")
    if not check(info is not None, "the recipe has package_info()"):
        return
    components = {literal(n.slice) for n in ast.walk(info) if isinstance(n, ast.Subscript)
                  and getattr(n.value, "attr", "") == "components"}
    check(components == set(facts["components"]),
          "package_info() declares exactly the CMake components",
          f"{sorted(components)} != {sorted(facts['components'])}")
    target_names = [literal(c.args[1]) for c in ast.walk(info) if isinstance(c, ast.Call)
                    and getattr(c.func, "attr", "") == "set_property" and len(c.args) == 2
                    and literal(c.args[0]) == "cmake_target_name"]
    expected_targets = {f"DistComm::{c}" for c in facts["components"]} | {"DistComm::DistComm"}
    check(set(target_names) == expected_targets,
          "package_info() maps each component to DistComm::<component>, the root to "
          "DistComm::DistComm", f"{sorted(target_names)}")
    file_names = [literal(c.args[1]) for c in ast.walk(info) if isinstance(c, ast.Call)
                  and getattr(c.func, "attr", "") == "set_property" and len(c.args) == 2
                  and literal(c.args[0]) == "cmake_file_name"]
    check(file_names == ["DistComm"], "package_info() sets cmake_file_name DistComm")
    check_targets("Conan recipe", " ".join(t or "" for t in target_names), facts, installed)
    if installed:
        exported = {f"DistComm::{t}" for t in installed["targets"]}
        check(exported <= expected_targets, "every exported target has a Conan component",
              f"{sorted(exported - expected_targets)}")

    # exports_sources must carry every folder the library build adds.
    exports = literal(attrs.get("exports_sources")) or ()
    exports = (exports,) if isinstance(exports, str) else exports
    needed = {d.split("/")[0] for d in facts["subdirs"]} - {"examples", "bench", "tests"}
    needed = {"backends" if "{" in d or d.startswith("backends") else d for d in needed}
    needed |= {"src", "include", "cmake", "CMakeLists.txt", "LICENSE"}
    covered = {e.split("/")[0] for e in exports}
    check(needed <= covered, "exports_sources carries every folder the library build uses",
          f"missing {sorted(needed - covered)}")


def check_test_package(src):
    tp = src / "test_package"
    cmake = (tp / "CMakeLists.txt").read_text() if (tp / "CMakeLists.txt").is_file() else ""
    check("find_package(DistComm" in cmake and "DistComm::DistComm" in cmake,
          "test_package/CMakeLists.txt finds DistComm and links DistComm::DistComm")
    try:
        tree = ast.parse((tp / "conanfile.py").read_text())
        ok = any(isinstance(n, ast.Attribute) and n.attr == "tested_reference_str"
                 for n in ast.walk(tree))
        check(ok, "test_package/conanfile.py parses and requires tested_reference_str")
    except (OSError, SyntaxError) as e:
        check(False, "test_package/conanfile.py parses", str(e))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-dir", required=True, type=pathlib.Path)
    parser.add_argument("--prefix", type=pathlib.Path, help="an installed DistComm")
    args = parser.parse_args()
    src = args.source_dir.resolve()
    facts = cmake_facts(src)
    print(f"DistComm {facts['version']}, components: {' '.join(facts['components'])}")
    installed = installed_facts(args.prefix) if args.prefix else None
    if installed:
        print(f"installed: components {' '.join(installed['built'])}; exported targets "
              f"{' '.join(sorted(installed['targets']))}")
    check_vcpkg(src, facts, installed)
    check_conan(src, facts, installed)
    check_test_package(src)
    if FAILURES:
        print(f"\n{len(FAILURES)} check(s) failed")
        return 1
    print("\nall recipe checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
