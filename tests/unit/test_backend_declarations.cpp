// Every built backend declares itself once (its traits, backend_traits.hpp), and every consumer
// of that declaration sees the same backend with the same capabilities: the registry, the build
// (the declarations it read and the lists of backends it derived, passed in by
// tests/CMakeLists.txt), distcomm-run --help, the backend's plugin (its exported declaration),
// init()'s default rule and the hierarchical choice of the backend inside a host.
#include <doctest/doctest.h>

#include <array>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "distcomm/plugin/loader.hpp"
#include "distcomm/registry/backends.hpp"

namespace dc = distcomm;

namespace {

// "processes, store, split": the names of the capabilities `c` has, in capability_names' order.
std::string capability_text(dc::capability c) {
  std::string s;
  for (const dc::capability_name& n : dc::capability_names) {
    if ((c & n.value) == n.value) s += (s.empty() ? "" : ", ") + std::string(n.name);
  }
  return s;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, sep)) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

// What the build read from each declaration: name -> "memory:cap,cap,...".
std::map<std::string, std::string> build_declarations() {
  std::map<std::string, std::string> out;
  for (const std::string& entry : split(DISTCOMM_BUILD_DECLARATIONS, '|')) {
    const auto colon = entry.find(':');
    out[entry.substr(0, colon)] = entry.substr(colon + 1);
  }
  return out;
}

std::string run(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> p(::popen(command.c_str(), "r"), ::pclose);
  REQUIRE(p != nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), p.get())) out.append(buf.data(), n);
  return out;
}

}  // namespace

TEST_CASE("the build read every backend's declaration as the registry does") {
  const std::map<std::string, std::string> built = build_declarations();
  CHECK(built.size() == dc::built_backends().size());
  for (const dc::backend_info& b : dc::built_backends()) {
    CAPTURE(b.name);
    REQUIRE(built.count(b.name) == 1);
    std::string caps;
    for (const dc::capability_name& n : dc::capability_names) {
      if (b.traits.can(n.value)) caps += (caps.empty() ? "" : ",") + std::string(n.name);
    }
    CHECK(built.at(b.name) == std::string(to_string(b.traits.memory())) + ":" + caps);
    CHECK(std::string(b.name) == b.traits.name());
    CHECK(std::string(b.summary) == b.traits.summary());
  }
}

TEST_CASE("the build's lists of backends follow from the declarations") {
  std::set<std::string> process, store;
  for (const dc::backend_info& b : dc::built_backends()) {
    if (b.traits.memory() != dc::memory_kind::host || !b.traits.can(dc::capability::processes)) {
      continue;
    }
    process.insert(b.name);
    if (b.traits.can(dc::capability::store)) store.insert(b.name);
  }
  const std::vector<std::string> p = split(DISTCOMM_BUILD_PROCESS_BACKENDS, ' ');
  const std::vector<std::string> s = split(DISTCOMM_BUILD_STORE_BACKENDS, ' ');
  CHECK(std::set<std::string>(p.begin(), p.end()) == process);
  CHECK(std::set<std::string>(s.begin(), s.end()) == store);
}

TEST_CASE("distcomm-run --help lists every built backend with its declaration") {
  const std::string help = run(std::string(DISTCOMM_RUN_PATH) + " --help 2>&1");
  for (const dc::backend_info& b : dc::built_backends()) {
    CAPTURE(b.name);
    std::string caps = capability_text(b.traits.capabilities());
    if (b.traits.memory() != dc::memory_kind::host) {
      caps = std::string(to_string(b.traits.memory())) + (caps.empty() ? "" : ", ") + caps;
    }
    const std::string line = "\n  " + std::string(b.name) + " (" + caps + "): " + b.summary;
    CHECK_MESSAGE(help.find(line) != std::string::npos, "not in --help: " << line << "\n" << help);
  }
}

TEST_CASE("each built backend's plugin declares what the backend does behind the ABI") {
  // Behind the plugin ABI a backend has no sub-communicators, so no shrink either.
  const dc::capability behind_abi = dc::capability::processes | dc::capability::store |
                                    dc::capability::mpi_world | dc::capability::single_host |
                                    dc::capability::grow;
  for (const dc::backend_info& b : dc::built_backends()) {
    CAPTURE(b.name);
    const std::string file = std::string(DISTCOMM_PLUGIN_DIR) + "/" + dc::plugin::file_name(b.name);
    std::FILE* f = std::fopen(file.c_str(), "r");
    if (f == nullptr) {
      MESSAGE("no plugin built for " << b.name << " (" << file << ")");
      continue;
    }
    std::fclose(f);
    const dc::plugin::library lib = dc::plugin::load_file(file);
    REQUIRE(lib.declared() != nullptr);
    const dc::backend_traits t = dc::plugin::traits_of(lib);
    CHECK(std::string(t.name()) == b.name);
    CHECK(std::string(t.summary()) == b.summary);
    CHECK(t.memory() == b.traits.memory());
    CHECK(capability_text(t.capabilities()) ==
          capability_text(b.traits.capabilities() & behind_abi));
  }
}

TEST_CASE("the default rule and the hierarchical inside-host choice read the declarations") {
  dc::world_info one_host;
  one_host.size = 4;
  one_host.local_size = 4;
  one_host.launcher = dc::launcher_kind::torchrun;
  const dc::backend_traits chosen = dc::traits_of(dc::default_backend(one_host));
  CHECK(chosen.memory() == dc::memory_kind::host);
  CHECK(chosen.can(dc::capability::processes));
  CHECK(dc::can_run(chosen, one_host));
  // No backend that can run the job is ranked before the one chosen.
  for (const dc::backend_info& b : dc::built_backends()) {
    CAPTURE(b.name);
    if (b.traits.default_rank() > 0 && dc::can_run(b.traits, one_host)) {
      CHECK(b.traits.default_rank() >= chosen.default_rank());
    }
  }
  dc::world_info across = one_host;
  across.local_size = 2;  // two hosts
  CHECK(!dc::traits_of(dc::default_backend(across)).can(dc::capability::single_host));
  // Through a program's store (the torch binding's), never an MPI world.
  across.launcher = dc::launcher_kind::open_mpi;
  CHECK(dc::traits_of(dc::default_backend(across, true)).can(dc::capability::store));
  const std::string inside = dc::intra_host_backend();
  if (!inside.empty()) {
    const dc::backend_traits t = dc::traits_of(inside);
    CHECK(t.can(dc::capability::single_host | dc::capability::store | dc::capability::processes));
  }
}

TEST_CASE("a name neither built nor a plugin is refused, naming the built backends") {
  // The registry's answer for a name it does not know names the backends it does.
  bool threw = false;
  try {
    (void)dc::traits_of("no-such-backend");
  } catch (const dc::invalid_argument_error& e) {
    threw = true;
    CHECK(std::string(e.what()).find(dc::join_names(dc::built_backends())) != std::string::npos);
  }
  CHECK(threw);
}
