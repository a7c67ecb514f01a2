# Conan 2 recipe for DistComm: `conan create .` builds and tests the package (test_package/),
# `conan install . && cmake --preset conan-release` builds this checkout with Conan's
# dependencies. See docs/INSTALL.md.
#
# Dependencies from Conan: OpenSSL (libcrypto, public: core links it), nlohmann_json and CLI11
# (build only: DistComm's sources and distcomm-run use them, its headers do not).
# The transports come from the system, as they do for the CMake build: ConanCenter has no gloo
# or UCX package, an MPI must match the cluster's launcher and network stack, and NCCL needs the
# CUDA toolkit and driver installed on the machine. package_info() asks pkg-config for UCX's and
# MPI's flags, so consumers link the same libraries DistComm was built against.
import os
import re

from conan import ConanFile
from conan.errors import ConanException, ConanInvalidConfiguration
from conan.tools.build import check_min_cppstd
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout
from conan.tools.files import copy, load, rmdir
from conan.tools.gnu import PkgConfig

required_conan_version = ">=2.0"

# Backends that an option switches on: DISTCOMM_OPTIONAL_BACKENDS of the root CMakeLists.txt, in
# its order (tests/packaging/check_recipes.py checks that they agree). The CUDA layer's option
# with_cuda is passed on its own in generate().
_BACKENDS = ("mpi", "gloo", "ucx", "shm", "nccl")


class DistCommConan(ConanFile):
    name = "distcomm"
    description = "Embeddable gradient averaging for data-parallel training"
    license = "Apache-2.0"
    topics = ("allreduce", "collectives", "data-parallel", "mpi", "gloo", "ucx", "shm", "nccl")
    package_type = "library"
    settings = "os", "arch", "compiler", "build_type"
    options = {
        "shared": [True, False],
        "fPIC": [True, False],
        "with_mpi": [True, False],
        "with_gloo": [True, False],
        "with_ucx": [True, False],
        "with_shm": [True, False],
        "with_nccl": [True, False],
        "with_cuda": [True, False],
    }
    # Core and the local backend only, unless a transport is asked for: each needs a system
    # library (see above), but shm (Linux only), which is off like the others so that an option
    # means the same in Conan as a vcpkg feature.
    default_options = {
        "shared": False,
        "fPIC": True,
        "with_mpi": False,
        "with_gloo": False,
        "with_ucx": False,
        "with_shm": False,
        "with_nccl": False,
        "with_cuda": False,
    }
    exports_sources = ("CMakeLists.txt", "LICENSE", "cmake/*", "include/*", "src/*",
                       "cuda/*", "init/*", "backends/*", "plugins/*", "tools/*", "bindings/*")

    def set_version(self):
        # One version, the one in project(DistComm VERSION ...).
        cmakelists = load(self, os.path.join(self.recipe_folder, "CMakeLists.txt"))
        match = re.search(r"project\(DistComm\s+VERSION\s+([0-9.]+)", cmakelists)
        if not match:
            raise ConanException("CMakeLists.txt: no project(DistComm VERSION x.y.z)")
        self.version = match.group(1)

    def config_options(self):
        if self.settings.os == "Windows":
            del self.options.fPIC
        if self.settings.os != "Linux":
            del self.options.with_shm  # futexes and pidfds are Linux's

    def configure(self):
        if self.options.shared:
            self.options.rm_safe("fPIC")
        if self.options.with_nccl:
            self.options.with_cuda = True  # the nccl backend is built on the CUDA layer

    def layout(self):
        cmake_layout(self, src_folder=".")

    def requirements(self):
        self.requires("openssl/[>=3 <4]")
        self.requires("nlohmann_json/3.11.3", visible=False)
        self.requires("cli11/2.4.2", visible=False)

    def validate(self):
        check_min_cppstd(self, 17)
        if self.settings.os == "Windows":
            raise ConanInvalidConfiguration("DistComm needs POSIX sockets and processes")
        if self.options.with_nccl and self.settings.os != "Linux":
            raise ConanInvalidConfiguration("with_nccl needs Linux (CUDA and NCCL)")
        if self.options.with_cuda and self.settings.os != "Linux":
            raise ConanInvalidConfiguration("with_cuda needs Linux (the CUDA toolkit)")

    def generate(self):
        tc = CMakeToolchain(self)
        tc.cache_variables["DISTCOMM_BUILD_TESTS"] = False
        tc.cache_variables["DISTCOMM_BUILD_EXAMPLES"] = False
        tc.cache_variables["DISTCOMM_BUILD_BENCH"] = False
        tc.cache_variables["DISTCOMM_INSTALL"] = True
        # ON makes a backend whose dependency is missing a configure error instead of a skip;
        # OFF leaves it out even where its dependency is installed.
        for backend in _BACKENDS:
            enabled = bool(self.options.get_safe(f"with_{backend}"))
            tc.cache_variables[f"DISTCOMM_WITH_{backend.upper()}"] = "ON" if enabled else "OFF"
        # The CUDA layer (DistComm::cuda: kernels, cuda::fusion, cuda::host_staged) likewise.
        tc.cache_variables["DISTCOMM_WITH_CUDA"] = "ON" if self.options.with_cuda else "OFF"
        # The torch.distributed backend is a Python extension, not part of the C++ package.
        tc.cache_variables["DISTCOMM_WITH_TORCH"] = "OFF"
        tc.generate()
        CMakeDeps(self).generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def package(self):
        copy(self, "LICENSE", src=self.source_folder,
             dst=os.path.join(self.package_folder, "licenses"))
        CMake(self).install()
        # Consumers get CMake and pkg-config files generated from package_info() instead.
        rmdir(self, os.path.join(self.package_folder, "lib", "cmake"))
        rmdir(self, os.path.join(self.package_folder, "lib", "pkgconfig"))

    def _add_system_module(self, component, modules):
        """Adds the first of the pkg-config modules found to component (a system library)."""
        for module in modules:
            try:
                pc = PkgConfig(self, module)
                libs = pc.libs
            except ConanException:
                continue
            component.system_libs.extend(libs)
            component.includedirs.extend(pc.includedirs)
            component.libdirs.extend(pc.libdirs)
            component.defines.extend(pc.defines)
            component.cxxflags.extend(pc.cflags)
            component.sharedlinkflags.extend(pc.linkflags)
            component.exelinkflags.extend(pc.linkflags)
            return
        raise ConanException(f"none of the pkg-config modules {', '.join(modules)} was found: "
                             "install the system package that provides it")

    def package_info(self):
        # find_package(DistComm) with targets DistComm::<component> and DistComm::DistComm, as
        # DistComm's own CMake package has them; pkg-config names as its installed .pc files.
        self.cpp_info.set_property("cmake_file_name", "DistComm")
        self.cpp_info.set_property("cmake_target_name", "DistComm::DistComm")
        self.cpp_info.set_property("pkg_config_name", "distcomm-all")

        core = self.cpp_info.components["core"]
        core.set_property("cmake_target_name", "DistComm::core")
        core.set_property("pkg_config_name", "distcomm-core")
        core.libs = ["distcomm_core"]
        core.requires = ["openssl::crypto"]
        if self.settings.os in ("Linux", "FreeBSD"):
            core.system_libs = ["pthread"]

        local = self.cpp_info.components["local"]
        local.set_property("cmake_target_name", "DistComm::local")
        local.set_property("pkg_config_name", "distcomm")  # distcomm.pc: core and local
        local.libs = ["distcomm_local"]
        local.requires = ["core"]

        # Backend plugins: the C ABI header (header-only) and the loader with plugin_backend.
        plugin_abi = self.cpp_info.components["plugin_abi"]
        plugin_abi.set_property("cmake_target_name", "DistComm::plugin_abi")
        plugin_abi.set_property("pkg_config_name", "distcomm-plugin_abi")
        plugin_abi.libs = []
        plugin = self.cpp_info.components["plugin"]
        plugin.set_property("cmake_target_name", "DistComm::plugin")
        plugin.set_property("pkg_config_name", "distcomm-plugin")
        plugin.libs = ["distcomm_plugin"]
        plugin.requires = ["core", "plugin_abi"]
        if self.settings.os in ("Linux", "FreeBSD"):
            plugin.system_libs = ["dl"]

        if self.options.with_mpi:
            mpi = self.cpp_info.components["mpi"]
            mpi.set_property("cmake_target_name", "DistComm::mpi")
            mpi.set_property("pkg_config_name", "distcomm-mpi")
            mpi.libs = ["distcomm_mpi"]
            mpi.requires = ["local"]  # and core through it, as DistComm::mpi and distcomm-mpi.pc
            # The header includes <mpi.h>; the C API only, as FindMPI's MPI_CXX_SKIP_MPICXX.
            mpi.defines = ["OMPI_SKIP_MPICXX", "MPICH_SKIP_MPICXX"]
            self._add_system_module(mpi, ("ompi-c", "mpich", "impi"))

        if self.options.with_gloo:
            gloo = self.cpp_info.components["gloo"]
            gloo.set_property("cmake_target_name", "DistComm::gloo")
            gloo.set_property("pkg_config_name", "distcomm-gloo")
            gloo.libs = ["distcomm_gloo"]
            gloo.requires = ["local"]  # and core through it, as DistComm::gloo and distcomm-gloo.pc
            gloo.system_libs = ["gloo"]  # libgloo-dev; gloo has no pkg-config module

        if self.options.with_ucx:
            ucx = self.cpp_info.components["ucx"]
            ucx.set_property("cmake_target_name", "DistComm::ucx")
            ucx.set_property("pkg_config_name", "distcomm-ucx")
            ucx.libs = ["distcomm_ucx"]
            ucx.requires = ["local"]  # and core through it, as DistComm::ucx and distcomm-ucx.pc
            self._add_system_module(ucx, ("ucx",))

        if self.options.get_safe("with_shm"):
            shm = self.cpp_info.components["shm"]
            shm.set_property("cmake_target_name", "DistComm::shm")
            shm.set_property("pkg_config_name", "distcomm-shm")
            shm.libs = ["distcomm_shm"]
            shm.requires = ["local"]  # and core through it, as DistComm::shm and distcomm-shm.pc

        # The CUDA toolkit's folders, for the components whose headers include CUDA's.
        cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
        cuda_home_found = os.path.isdir(os.path.join(cuda_home, "lib64"))

        if self.options.with_cuda:
            cuda = self.cpp_info.components["cuda"]
            cuda.set_property("cmake_target_name", "DistComm::cuda")
            cuda.set_property("pkg_config_name", "distcomm-cuda")
            cuda.libs = ["distcomm_cuda"]
            cuda.requires = ["core"]
            cuda.system_libs = ["cudart"]
            if cuda_home_found:
                cuda.libdirs.append(os.path.join(cuda_home, "lib64"))
                cuda.includedirs.append(os.path.join(cuda_home, "include"))

        if self.options.with_nccl:
            nccl = self.cpp_info.components["nccl"]
            nccl.set_property("cmake_target_name", "DistComm::nccl")
            nccl.set_property("pkg_config_name", "distcomm-nccl")
            nccl.libs = ["distcomm_nccl"]
            nccl.requires = ["local", "cuda"]  # and core through them
            nccl.system_libs = ["nccl"]  # cudart and CUDA's folders come with cuda

        # distcomm::init() and the backend registry: it requires every other component of this
        # package (declared above), so a program linking it has every backend it was built with.
        init = self.cpp_info.components["init"]
        init.set_property("cmake_target_name", "DistComm::init")
        init.set_property("pkg_config_name", "distcomm-init")
        init.libs = ["distcomm_init"]
        init.requires = [name for name in self.cpp_info.components if name != "init"]
