#!/usr/bin/env python3
"""Static checks of DistComm's package recipes against its CMake build (label "packaging").

Neither vcpkg nor Conan is installed where the tests run, so the recipes are checked for what can
be known without them: that they parse, carry the required fields, name exactly the components
DistComm's CMake package has (cmake/DistCommInstall.cmake: DISTCOMM_KNOWN_COMPONENTS, with the
variables it names, such as DISTCOMM_OPTIONAL_BACKENDS, read from the root CMakeLists.txt), switch
components with cache options the CMake build defines, and mention only targets that exist. The
Conan recipe's package_info() is also run, with stand-ins for Conan's classes, for every option
switched on alone and for all of them: its components must be the ones such a build has, each
requiring only components of the package, and init every other one. With --prefix (an installed
DistComm) the names are also checked against the installed export and its pkg-config modules.

usage: check_recipes.py --source-dir DIR [--prefix INSTALLED_PREFIX]
Python 3 standard library only.
"""

import argparse
import ast
import collections
import json
import pathlib
import re
import sys
import types

FAILURES = []


def check(ok, what, detail=""):
    """Records one check; prints it with its outcome."""
    print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f": {detail}" if detail and not ok else ""))
    if not ok:
        FAILURES.append(what)
    return ok


def plain_sets(text):
    """{name: words} for every set(DISTCOMM_<NAME> word...) that is not a cache entry and is the
    only set() of its variable in text (a variable set twice has no one value to read)."""
    code = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    found = re.findall(r"\bset\(\s*(DISTCOMM_\w+)\b([^)]*)\)", code)
    counts = {}
    for name, _ in found:
        counts[name] = counts.get(name, 0) + 1
    return {name: words.split() for name, words in found
            if counts[name] == 1 and "CACHE" not in words.split() and '"' not in words}


def expand(words, variables, where):
    """words with each ${VAR} replaced by the words of VAR (a list of variables)."""
    out = []
    for word in words:
        ref = re.fullmatch(r"\$\{(\w+)\}", word)
        if ref and ref.group(1) in variables:
            out += expand(variables[ref.group(1)], variables, where)
        elif "$" in word:
            sys.exit(f"check_recipes.py: {where} uses {word}, which the root CMakeLists.txt does "
                     "not set once with a plain set(): extend check_recipes.py to read it")
        else:
            out.append(word)
    return out


def cmake_facts(src):
    """What the CMake build says: version, known components, backends, install dir, cache
    options, and which components a cache option switches (the others are always built)."""
    root = (src / "CMakeLists.txt").read_text()
    install = (src / "cmake" / "DistCommInstall.cmake").read_text()
    variables = plain_sets(root)
    version = re.search(r"project\(DistComm\s+VERSION\s+([0-9.]+)", root)
    known = re.search(r"set\(DISTCOMM_KNOWN_COMPONENTS\s+([^)]*)\)", install)
    cmakedir = re.search(r'set\(DISTCOMM_INSTALL_CMAKEDIR\s+"\$\{CMAKE_INSTALL_LIBDIR\}/([^"]+)"',
                         install)
    if not (version and known and cmakedir and "DISTCOMM_OPTIONAL_BACKENDS" in variables):
        sys.exit("check_recipes.py: cannot read the version, DISTCOMM_OPTIONAL_BACKENDS, "
                 "DISTCOMM_KNOWN_COMPONENTS or DISTCOMM_INSTALL_CMAKEDIR from the CMake sources")
    components = expand(known.group(1).split(), variables, "DISTCOMM_KNOWN_COMPONENTS")
    # Every cache variable or option the build defines, wherever it is defined.
    cmake_files = [src / "CMakeLists.txt", *sorted((src / "cmake").glob("*.cmake")),
                   *sorted((src / "backends").glob("*/CMakeLists.txt")),
                   src / "tools" / "CMakeLists.txt"]
    text = "\n".join(f.read_text() for f in cmake_files if f.is_file())
    defined = set(re.findall(r"\boption\(\s*(DISTCOMM_\w+)", text))
    defined |= set(re.findall(r"\bset\(\s*(DISTCOMM_\w+)\s+[^)]*\bCACHE\b", text))
    # ... including those a foreach() defines, e.g. set(DISTCOMM_WITH_${b} ... CACHE ...) over
    # IN ITEMS a b, or over IN LISTS DISTCOMM_OPTIONAL_BACKENDS with string(TOUPPER ${b} u) and
    # set(DISTCOMM_WITH_${u} ... CACHE ...).
    for var, args, body in re.findall(r"\bforeach\(\s*(\w+)\s+([^)]*)\)(.*?)\bendforeach\(",
                                      text, re.DOTALL):
        args = args.split()
        if args[:2] == ["IN", "LISTS"]:
            items = [w for name in args[2:] for w in variables.get(name, [])]
        elif args[:2] == ["IN", "ITEMS"]:
            items = args[2:]
        elif args and args[0] != "RANGE" and "IN" not in args:
            items = args
        else:
            continue
        spellings = {var: str}
        for upper in re.findall(rf"\bstring\(\s*TOUPPER\s+\$\{{{var}\}}\s+(\w+)\s*\)", body):
            spellings[upper] = str.upper
        for name, spell in spellings.items():
            for head, tail in re.findall(rf"\bset\(\s*(DISTCOMM_\w*)\$\{{{name}\}}(\w*)\s+"
                                         r"[^)]*\bCACHE\b", body):
                defined |= {f"{head}{spell(item)}{tail}" for item in items}
    # The folders the root CMakeLists adds unconditionally or for a library build.
    subdirs = set(re.findall(r"add_subdirectory\(\s*([\w/.${}]+)", root))
    # A component with a switch DISTCOMM_WITH_<COMPONENT> is built on request (a vcpkg feature,
    # a Conan option); the others (core, local, plugin_abi, plugin, init) always are.
    switched = [c for c in components if f"DISTCOMM_WITH_{c.upper()}" in defined]
    return {
        "version": version.group(1),
        "components": components,
        "backends": variables["DISTCOMM_OPTIONAL_BACKENDS"],
        "switched": switched,
        "always_built": [c for c in components if c not in switched],
        "cmakedir": "lib/" + cmakedir.group(1),
        "cache_options": defined,
        "subdirs": subdirs,
    }


def pc_module(component):
    """The pkg-config module DistCommInstall.cmake installs for a component."""
    return "distcomm" if component in ("core", "local") else f"distcomm-{component}"


def installed_facts(prefix):
    """Targets in the installed export, built components, installed pkg-config modules."""
    targets_files = sorted(prefix.glob("**/DistCommTargets.cmake"))
    config_files = sorted(prefix.glob("**/DistCommConfig.cmake"))
    if not (check(len(targets_files) == 1, "the prefix has one DistCommTargets.cmake", str(prefix))
            and check(len(config_files) == 1, "the prefix has one DistCommConfig.cmake")):
        return None
    text = targets_files[0].read_text()
    targets = set(re.findall(r"add_library\(DistComm::(\w+)\s", text))
    # The DistComm targets each one links (INTERFACE_LINK_LIBRARIES, $<LINK_ONLY:...> included).
    links = {t: set() for t in targets}
    for target, props in re.findall(r"set_target_properties\(DistComm::(\w+) PROPERTIES(.*?)\n\)",
                                    text, re.DOTALL):
        value = re.search(r'INTERFACE_LINK_LIBRARIES "([^"]*)"', props)
        if value:
            links[target] |= set(re.findall(r"DistComm::(\w+)", value.group(1)))
    built = re.search(r'set\(DistComm_BUILT_COMPONENTS "([^"]*)"\)', config_files[0].read_text())
    modules = {p.stem for p in prefix.glob("**/pkgconfig/*.pc")}
    return {"targets": targets, "built": built.group(1).split(";") if built else [],
            "modules": modules, "links": links}


def closure(graph, roots):
    """Every node reachable from roots in graph ({node: successors}), roots included."""
    seen, todo = set(), list(roots)
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return seen


def check_vcpkg(src, facts, installed):
    port = src / "ports" / "distcomm"
    switched = facts["switched"]
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
    check(sorted(features) == sorted(switched),
          "vcpkg.json features are the CMake components a DISTCOMM_WITH_<COMPONENT> switches",
          f"features {sorted(features)}, switched components {sorted(switched)}")
    for name, feature in features.items():
        check(bool(feature.get("description")), f"vcpkg feature '{name}' has a description")
    for name, dep in (("mpi", "mpi"), ("gloo", "gloo")):
        if name in features:
            check(dep in features[name].get("dependencies", []),
                  f"vcpkg feature '{name}' depends on vcpkg's '{dep}' port")

    portfile = (port / "portfile.cmake").read_text()
    code = "\n".join(line.split("#", 1)[0] for line in portfile.splitlines())
    mapping = dict(re.findall(r"^\s*(\w+)\s+(DISTCOMM_WITH_\w+)\s*$", code, re.MULTILINE))
    check(mapping == {c: f"DISTCOMM_WITH_{c.upper()}" for c in switched},
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
    modules = {pc_module(c) for c in facts["components"]} | {"distcomm-all"}
    # Every component's module (and the umbrella's) has a template, and the usage names no other.
    templates = {p.name[:-len(".pc.in")] for p in (src / "cmake").glob("*.pc.in")}
    check(templates == modules,
          "cmake/ has a pkg-config template per component (core and local: distcomm) and "
          "distcomm-all's", f"templates {sorted(templates)}, modules {sorted(modules)}")
    check(mentioned <= modules, "the usage names only pkg-config modules DistComm installs",
          f"named {sorted(mentioned - modules)}")
    if installed:
        expected = {pc_module(c) for c in installed["built"]} | {"distcomm-all"}
        check(expected == installed["modules"],
              "the installed pkg-config modules are those of the built components and "
              "distcomm-all", f"missing {sorted(expected - installed['modules'])}, not expected "
              f"{sorted(installed['modules'] - expected)}")


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
    switched, backends = facts["switched"], facts["backends"]
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
    expected = {"shared", "fPIC"} | {f"with_{c}" for c in switched}
    check(set(options) == expected,
          "the recipe's options are shared, fPIC and with_<component> for each switched one",
          f"options {sorted(options)}, expected {sorted(expected)}")
    check(set(defaults) == set(options), "every option has a default",
          f"defaults {sorted(defaults)}")

    module_level = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign)
                    for t in n.targets if isinstance(t, ast.Name)}
    check(list(literal(module_level.get("_BACKENDS")) or ()) == backends,
          "the recipe's _BACKENDS (one DISTCOMM_WITH_<BACKEND> each) are the root "
          "CMakeLists.txt's DISTCOMM_OPTIONAL_BACKENDS",
          f"{literal(module_level.get('_BACKENDS'))} != {backends}")
    generate = ast.get_source_segment(path.read_text(), methods.get("generate")) or ""
    check('f"DISTCOMM_WITH_{backend.upper()}"' in generate,
          "generate() passes DISTCOMM_WITH_<BACKEND> for each of _BACKENDS")
    passed = set(re.findall(r'cache_variables\["(DISTCOMM_\w+)"\]', generate))
    passed |= {f"DISTCOMM_WITH_{b.upper()}" for b in backends}
    unpassed = sorted(c for c in switched if f"DISTCOMM_WITH_{c.upper()}" not in passed)
    check(not unpassed, "generate() passes DISTCOMM_WITH_<COMPONENT> for each with_<component>",
          f"not passed: {unpassed}")
    check_cache_options(src, "Conan recipe", passed, facts)

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

    check_conan_components(src, facts, installed,
                           load_recipe(path, cls.name), defaults)

    # exports_sources must carry every folder the library build adds.
    exports = literal(attrs.get("exports_sources")) or ()
    exports = (exports,) if isinstance(exports, str) else exports
    needed = {d.split("/")[0] for d in facts["subdirs"]} - {"examples", "bench", "tests"}
    needed = {"backends" if "{" in d or d.startswith("backends") else d for d in needed}
    needed |= {"src", "include", "cmake", "CMakeLists.txt", "LICENSE"}
    covered = {e.split("/")[0] for e in exports}
    check(needed <= covered, "exports_sources carries every folder the library build uses",
          f"missing {sorted(needed - covered)}")


class _Component:
    """Conan's cpp_info (and each component's), as much as a recipe's package_info() uses."""

    def __init__(self):
        self.properties = {}
        for field in ("libs", "requires", "system_libs", "includedirs", "libdirs", "defines",
                      "cflags", "cxxflags", "sharedlinkflags", "exelinkflags"):
            setattr(self, field, [])
        self.components = collections.defaultdict(_Component)

    def set_property(self, name, value):
        self.properties[name] = value

    def get_property(self, name):
        return self.properties.get(name)


class _Options:
    """Conan's options: attributes, get_safe and rm_safe."""

    def __init__(self, values):
        self.__dict__["_values"] = dict(values)

    def __getattr__(self, name):
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        self._values[name] = value

    def get_safe(self, name, default=None):
        return self._values.get(name, default)

    def rm_safe(self, name):
        self._values.pop(name, None)


def load_recipe(path, class_name):
    """The recipe's class, its module run with stand-ins for the conan modules it imports."""
    class ConanException(Exception):
        pass

    class ConanInvalidConfiguration(ConanException):
        pass

    class PkgConfig:  # a module found, with nothing in it
        def __init__(self, conanfile, name):
            self.libs, self.includedirs, self.libdirs = [], [], []
            self.defines, self.cflags, self.linkflags = [], [], []

    def unused(*args, **kwargs):
        raise AssertionError("package_info() and configure() must not call this")

    stubs = {
        "conan": {"ConanFile": object},
        "conan.errors": {"ConanException": ConanException,
                         "ConanInvalidConfiguration": ConanInvalidConfiguration},
        "conan.tools": {},
        "conan.tools.build": {"check_min_cppstd": unused},
        "conan.tools.cmake": {"CMake": unused, "CMakeDeps": unused, "CMakeToolchain": unused,
                              "cmake_layout": unused},
        "conan.tools.files": {"copy": unused, "load": unused, "rmdir": unused},
        "conan.tools.gnu": {"PkgConfig": PkgConfig},
    }
    saved = {name: sys.modules.get(name) for name in stubs}
    try:
        for name, attrs in stubs.items():
            module = types.ModuleType(name)
            module.__dict__.update(attrs)
            sys.modules[name] = module
        namespace = {"__name__": "distcomm_conanfile", "__file__": str(path)}
        exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    return namespace[class_name]


def run_package_info(recipe_class, defaults, switched_on):
    """configure() then package_info() on Linux with the defaults and with_<c> for switched_on;
    returns (the components switched on after configure(), the cpp_info)."""
    values = dict(defaults)
    values.update({f"with_{c}": True for c in switched_on})
    recipe = recipe_class()
    recipe.options = _Options(values)
    recipe.settings = types.SimpleNamespace(os="Linux", arch="x86_64", build_type="Release")
    recipe.cpp_info = _Component()
    recipe.configure()
    recipe.package_info()
    enabled = {name[len("with_"):] for name, value in recipe.options._values.items()
               if name.startswith("with_") and value}
    return enabled, recipe.cpp_info


def check_conan_components(src, facts, installed, recipe_class, defaults):
    """Runs package_info() for no switch, each switch alone and all of them (and the installed
    build's switches): the components must be those such a build has, each named as CMake and
    pkg-config name it, requiring only components of the package; init requires every other one;
    a switch turns on what the vcpkg feature of the same name does."""
    switched, always = facts["switched"], set(facts["always_built"])
    try:
        manifest = json.loads((src / "ports" / "distcomm" / "vcpkg.json").read_text())
    except (OSError, json.JSONDecodeError):
        manifest = {}
    runs = [("no with_* option", ())] + [(f"with_{c}", (c,)) for c in switched]
    runs.append(("every with_* option", tuple(switched)))
    if installed:
        runs.append(("the installed build's options",
                     tuple(c for c in switched if c in installed["built"])))
    for label, on in runs:
        try:
            enabled, info = run_package_info(recipe_class, defaults, on)
        except Exception as e:  # noqa: BLE001  (any failure of the recipe's code is reported)
            check(False, f"package_info() runs with {label}", f"{type(e).__name__}: {e}")
            continue
        comps = info.components
        problems = []
        if set(comps) != always | enabled:
            problems.append(f"components {sorted(comps)}, expected {sorted(always | enabled)}")
        for name, comp in comps.items():
            if comp.get_property("cmake_target_name") != f"DistComm::{name}":
                problems.append(f"{name}'s cmake_target_name is "
                                f"{comp.get_property('cmake_target_name')}")
            module = comp.get_property("pkg_config_name") or f"distcomm-{name}"
            if name != "core" and module != pc_module(name):  # core: Conan's own distcomm-core
                problems.append(f"{name}'s pkg_config_name is {module}, not {pc_module(name)}")
            stray = [r for r in comp.requires if "::" not in r and r not in comps]
            if stray:
                problems.append(f"{name} requires {stray}, not components of this package")
        if "init" in comps:
            missing = set(comps) - {"init"} - set(comps["init"].requires)
            if missing:
                problems.append(f"init does not require {sorted(missing)}")
        if info.get_property("pkg_config_name") != "distcomm-all":
            problems.append("the root's pkg_config_name is not distcomm-all")
        check(not problems, f"package_info() with {label}: the components of such a build, "
              "init requiring every other one", "; ".join(problems))
        if len(on) == 1:
            feature = manifest.get("features", {}).get(on[0], {})
            implied = {f for d in feature.get("dependencies", []) if isinstance(d, dict)
                       and d.get("name") == "distcomm" for f in d.get("features", [])}
            check(enabled - set(on) == implied,
                  f"with_{on[0]} turns on what vcpkg feature '{on[0]}' does",
                  f"Conan {sorted(enabled - set(on))}, vcpkg {sorted(implied)}")
        if installed and label.startswith("the installed"):
            graph = {name: {r for r in comp.requires if "::" not in r}
                     for name, comp in comps.items()}
            short = {t: sorted(installed["links"].get(t, set()) - closure(graph, [t]))
                     for t in comps if t in installed["targets"]}
            short = {t: s for t, s in short.items() if s}
            check(not short, "each Conan component requires (directly or not) every component "
                  "its exported CMake target links", str(short))
            umbrella = closure(installed["links"], ["DistComm"]) - {"DistComm"}
            check(umbrella == set(comps),
                  "the exported DistComm::DistComm links every component, as Conan's root does",
                  f"it links {sorted(umbrella)}, the package has {sorted(comps)}")


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
