# Install rules and the CMake package (find_package(DistComm COMPONENTS ...)).
# Included once, at the end of the root CMakeLists.txt, after every component target is defined:
# only the components that were actually built (a target distcomm_<name> exists) are installed,
# exported and advertised to consumers.
include_guard(GLOBAL)

if(NOT DISTCOMM_INSTALL)
  return()
endif()

include(CMakePackageConfigHelpers)

set(DISTCOMM_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/DistComm"
    CACHE STRING "Where DistCommConfig.cmake is installed (relative to the prefix)")
mark_as_advanced(DISTCOMM_INSTALL_CMAKEDIR)

# Every component DistComm knows of; a component is built when its target distcomm_<name> exists.
# core always is; cuda (the CUDA layer, cuda/) and the backends are added conditionally by their
# own CMakeLists, cuda before nccl, which links it. plugin_abi (the C header of backend plugins)
# and plugin (their loader and plugin_backend) are always built; init (the registries and
# distcomm::init()) links every other component that was built.
set(DISTCOMM_KNOWN_COMPONENTS core local cuda ${DISTCOMM_OPTIONAL_BACKENDS} plugin_abi plugin init)

set(DISTCOMM_BUILT_COMPONENTS "")
set(_distcomm_install_targets "")
foreach(_comp IN LISTS DISTCOMM_KNOWN_COMPONENTS)
  if(TARGET distcomm_${_comp})
    list(APPEND DISTCOMM_BUILT_COMPONENTS ${_comp})
    list(APPEND _distcomm_install_targets distcomm_${_comp})
  endif()
endforeach()
list(APPEND _distcomm_install_targets distcomm)  # the umbrella DistComm::DistComm

# distcomm_warnings is a build-only helper linked PRIVATE by every compiled component. For a static
# library CMake still records a PRIVATE dependency in the link interface ($<LINK_ONLY:...>), and
# install(EXPORT) then refuses to export a target that needs a non-exported one. Rewriting the
# reference here, once, keeps every current and future component's CMakeLists simple and keeps the
# helper (and its -Werror) out of consumers' builds.
foreach(_target IN LISTS _distcomm_install_targets)
  get_target_property(_links ${_target} INTERFACE_LINK_LIBRARIES)
  if(_links)
    string(REPLACE "$<LINK_ONLY:distcomm_warnings>" "$<LINK_ONLY:$<BUILD_INTERFACE:distcomm_warnings>>"
           _links "${_links}")
    set_property(TARGET ${_target} PROPERTY INTERFACE_LINK_LIBRARIES "${_links}")
  endif()
endforeach()

# ---- headers: include/ (core, strategies, fusion, communicator), cuda/include and each built --
# ---- backend's ---------------------------------------------------------------------------------
install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
        COMPONENT DistComm_Development
        FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")
install(FILES "${PROJECT_BINARY_DIR}/include/distcomm/backends/built.hpp"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/distcomm/backends"
        COMPONENT DistComm_Development)
# The plugin ABI's C header, the export side and the loader (plugins/).
foreach(_dir "${PROJECT_SOURCE_DIR}/plugins/include" "${PROJECT_SOURCE_DIR}/plugins/loader/include")
  install(DIRECTORY "${_dir}/"
          DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
          COMPONENT DistComm_Development
          FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")
endforeach()
foreach(_comp IN LISTS DISTCOMM_BUILT_COMPONENTS)
  set(_dir "${PROJECT_SOURCE_DIR}/backends/${_comp}/include")
  if(NOT IS_DIRECTORY "${_dir}")
    set(_dir "${PROJECT_SOURCE_DIR}/${_comp}/include")  # a layer of its own: cuda/
  endif()
  if(IS_DIRECTORY "${_dir}")
    install(DIRECTORY "${_dir}/"
            DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
            COMPONENT DistComm_Development
            FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")
  endif()
endforeach()

# ---- libraries and the export set --------------------------------------------------------------
install(TARGETS ${_distcomm_install_targets}
        EXPORT DistCommTargets
        RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT DistComm_Runtime
        LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT DistComm_Runtime
                NAMELINK_COMPONENT DistComm_Development
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT DistComm_Development
        INCLUDES DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")

install(EXPORT DistCommTargets
        NAMESPACE DistComm::
        FILE DistCommTargets.cmake
        DESTINATION "${DISTCOMM_INSTALL_CMAKEDIR}"
        COMPONENT DistComm_Development)

# ---- DistCommConfig.cmake + DistCommConfigVersion.cmake ----------------------------------------
# Before 1.0 a minor release may break the API, so 0.1.x only satisfies requests for 0.1.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(_distcomm_compat SameMinorVersion)
else()
  set(_distcomm_compat SameMajorVersion)
endif()

configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/DistCommConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/cmake/DistCommConfig.cmake"
  INSTALL_DESTINATION "${DISTCOMM_INSTALL_CMAKEDIR}"
  PATH_VARS DISTCOMM_INSTALL_PLUGINDIR)
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/cmake/DistCommConfigVersion.cmake"
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY ${_distcomm_compat})

install(FILES "${PROJECT_BINARY_DIR}/cmake/DistCommConfig.cmake"
              "${PROJECT_BINARY_DIR}/cmake/DistCommConfigVersion.cmake"
        DESTINATION "${DISTCOMM_INSTALL_CMAKEDIR}"
        COMPONENT DistComm_Development)
# Find modules a component's consumers need (DistCommConfig.cmake adds its own folder to
# CMAKE_MODULE_PATH before finding them), e.g. cmake/FindNCCL.cmake for the nccl component.
if(TARGET distcomm_nccl AND EXISTS "${PROJECT_SOURCE_DIR}/cmake/FindNCCL.cmake")
  install(FILES "${PROJECT_SOURCE_DIR}/cmake/FindNCCL.cmake"
          DESTINATION "${DISTCOMM_INSTALL_CMAKEDIR}"
          COMPONENT DistComm_Development)
endif()

# ---- pkg-config: distcomm.pc (core + local), distcomm-<component>.pc, distcomm-all.pc ----------
# For builds without CMake: c++ app.cpp $(pkg-config --cflags --libs distcomm-init).
# Every built component but local (which shares distcomm.pc with core) has a module from its
# template cmake/distcomm-<name>.pc.in: the backends, cuda, plugin_abi (the plugin ABI's headers
# only), plugin (the loader) and init, which requires the module of every component DistComm::init
# links. distcomm-all is the umbrella DistComm::DistComm: it requires the module of every
# component that target links. The modules init and the umbrella require are read from their
# targets' link interfaces, so the pkg-config and CMake views cannot drift apart.
# Written in two passes: at configure time everything but the prefix is filled in (below); the
# install step then writes prefix= as the prefix actually installed to, so `cmake --install
# --prefix DIR` and packagers that install into a staging prefix get a correct file.
set(DISTCOMM_INSTALL_PKGCONFIGDIR "${CMAKE_INSTALL_LIBDIR}/pkgconfig"
    CACHE STRING "Where DistComm's pkg-config modules are installed (relative to the prefix)")
mark_as_advanced(DISTCOMM_INSTALL_PKGCONFIGDIR)

# _distcomm_pc_dir(<out-var> <GNUInstallDirs path>): the path as a .pc variable, ${prefix}-based
# unless it was configured as an absolute path.
function(_distcomm_pc_dir out path)
  if(IS_ABSOLUTE "${path}")
    set(${out} "${path}" PARENT_SCOPE)
  else()
    set(${out} "\${prefix}/${path}" PARENT_SCOPE)
  endif()
endfunction()

# _distcomm_pc_link_dir_flag(<out-var> <library file>): -L<dir> for a library outside the
# compiler's own search path (nothing for /usr/lib and the like).
function(_distcomm_pc_link_dir_flag out file)
  get_filename_component(_dir "${file}" DIRECTORY)
  if(_dir IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
    set(${out} "" PARENT_SCOPE)
  else()
    set(${out} "-L${_dir}" PARENT_SCOPE)
  endif()
endfunction()

# _distcomm_pc_mpi(<requires-var> <cflags-var> <libs-var>): what DistComm::mpi's consumers need
# from MPI. The MPI implementation's own pkg-config module when it has one whose headers are the
# ones FindMPI chose (Open MPI: ompi-c, MPICH: mpich, Intel MPI: impi), else FindMPI's flags.
function(_distcomm_pc_mpi requires_var cflags_var libs_var)
  set(MPI_CXX_SKIP_MPICXX ON)
  find_package(MPI QUIET COMPONENTS CXX)  # again: the backend's result is local to its folder
  # FindMPI's definitions keep <mpi.h> from declaring the MPI-2 C++ bindings (OMPI_SKIP_MPICXX
  # and the like); without them a C++ consumer of Open MPI would need libmpi_cxx.
  set(_defines "")
  foreach(_def IN LISTS MPI_CXX_COMPILE_DEFINITIONS)
    string(APPEND _defines " -D${_def}")
  endforeach()
  string(STRIP "${_defines}" _defines)
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    foreach(_module IN ITEMS ompi-c mpich impi)
      string(REPLACE "-" "_" _prefix "_DISTCOMM_PC_${_module}")
      pkg_check_modules(${_prefix} QUIET ${_module})
      if(NOT ${_prefix}_FOUND)
        continue()
      endif()
      # A module matches when it names one of FindMPI's include folders (or when FindMPI needed
      # none, e.g. with CXX=mpicxx, where any installed MPI module is the best guess).
      set(_match FALSE)
      if(NOT MPI_CXX_INCLUDE_DIRS)
        set(_match TRUE)
      endif()
      foreach(_dir IN LISTS MPI_CXX_INCLUDE_DIRS)
        if(_dir IN_LIST ${_prefix}_INCLUDE_DIRS)
          set(_match TRUE)
        endif()
      endforeach()
      if(_match)
        set(${requires_var} "${_module}" PARENT_SCOPE)
        set(${cflags_var} "${_defines}" PARENT_SCOPE)
        set(${libs_var} "" PARENT_SCOPE)
        return()
      endif()
    endforeach()
  endif()
  set(_cflags " ${_defines}")
  foreach(_dir IN LISTS MPI_CXX_INCLUDE_DIRS)
    string(APPEND _cflags " -I${_dir}")
  endforeach()
  foreach(_opt IN LISTS MPI_CXX_COMPILE_OPTIONS)
    string(APPEND _cflags " ${_opt}")
  endforeach()
  set(_libs "")
  foreach(_lib IN LISTS MPI_CXX_LIBRARIES)
    string(APPEND _libs " ${_lib}")
  endforeach()
  foreach(_opt IN LISTS MPI_CXX_LINK_FLAGS)
    string(APPEND _libs " ${_opt}")
  endforeach()
  string(STRIP "${_cflags}" _cflags)
  string(STRIP "${_libs}" _libs)
  set(${requires_var} "" PARENT_SCOPE)
  set(${cflags_var} "${_cflags}" PARENT_SCOPE)
  set(${libs_var} "${_libs}" PARENT_SCOPE)
endfunction()

# _distcomm_pc_gloo(<libs-var>): gloo's library as linker flags (gloo has no pkg-config module).
function(_distcomm_pc_gloo libs_var)
  find_package(Gloo CONFIG QUIET)  # again: the backend's imported target is local to its folder
  set(_file "")
  if(TARGET gloo)
    get_target_property(_configs gloo IMPORTED_CONFIGURATIONS)
    foreach(_config IN LISTS _configs)
      get_target_property(_file gloo IMPORTED_LOCATION_${_config})
      if(_file)
        break()
      endif()
    endforeach()
  endif()
  if(NOT _file)
    set(${libs_var} "-lgloo" PARENT_SCOPE)
    return()
  endif()
  _distcomm_pc_link_dir_flag(_dir_flag "${_file}")
  set(${libs_var} "${_dir_flag} -lgloo" PARENT_SCOPE)
endfunction()

# _distcomm_pc_module(<out-var> <component>): the pkg-config module of a component (DistComm: the
# umbrella).
function(_distcomm_pc_module out comp)
  if(comp MATCHES "^(core|local)$")
    set(${out} distcomm PARENT_SCOPE)
  elseif(comp STREQUAL "DistComm")
    set(${out} distcomm-all PARENT_SCOPE)
  else()
    set(${out} distcomm-${comp} PARENT_SCOPE)
  endif()
endfunction()

# _distcomm_pc_linked_modules(<out-var> <target> <module>): "<module> = <version>" for each
# DistComm component the target links (PUBLIC or, for a static library, PRIVATE), other than the
# target's own module, in link order.
function(_distcomm_pc_linked_modules out target self)
  get_target_property(_links ${target} INTERFACE_LINK_LIBRARIES)
  set(_modules "")
  foreach(_link IN LISTS _links)
    if(NOT _link MATCHES "^(\\$<LINK_ONLY:)?distcomm_([a-z_]+)>?$")
      continue()
    endif()
    set(_comp "${CMAKE_MATCH_2}")
    if(NOT _comp IN_LIST DISTCOMM_BUILT_COMPONENTS)
      continue()
    endif()
    _distcomm_pc_module(_module ${_comp})
    if(NOT _module STREQUAL self)
      list(APPEND _modules "${_module} = ${PROJECT_VERSION}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES _modules)
  set(${out} "${_modules}" PARENT_SCOPE)
endfunction()

_distcomm_pc_dir(DISTCOMM_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
_distcomm_pc_dir(DISTCOMM_PC_PLUGINDIR "${DISTCOMM_INSTALL_PLUGINDIR}")
_distcomm_pc_dir(DISTCOMM_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
# Kept as a placeholder by the first pass, filled in by the install step.
set(DISTCOMM_PC_PREFIX "@DISTCOMM_PC_PREFIX@")
set(_distcomm_pc_threads "")
if(CMAKE_USE_PTHREADS_INIT)
  set(_distcomm_pc_threads "-pthread")
endif()
set(_distcomm_pc_stage "${PROJECT_BINARY_DIR}/pkgconfig")
set(_distcomm_pc_modules "")
foreach(_comp IN LISTS DISTCOMM_BUILT_COMPONENTS ITEMS DistComm)
  # core and local share distcomm.pc; a component's dependencies decide its fields.
  if(_comp STREQUAL "local")
    continue()
  endif()
  _distcomm_pc_module(_module ${_comp})
  set(_template "${PROJECT_SOURCE_DIR}/cmake/${_module}.pc.in")
  if(_comp STREQUAL "DistComm")
    set(_target distcomm)
  else()
    set(_target distcomm_${_comp})
  endif()
  if(NOT EXISTS "${_template}")
    message(WARNING "DistComm: component ${_comp} has no pkg-config template "
                    "cmake/${_module}.pc.in: no module ${_module} is installed")
    continue()
  endif()

  # What the component's consumers need besides DistComm's libraries. A static library needs its
  # dependencies on the consumer's link line (public fields); a shared one carries them itself
  # (private fields, used only by pkg-config --static).
  set(_requires "")
  set(_cflags "")
  set(_libs "")
  set(_public_requires "")  # needed even by a shared library's consumers (headers)
  set(_public_libs "")
  if(_comp STREQUAL "core")
    set(_requires libcrypto libcurl)  # OpenSSL's (the store's HMAC-SHA256), curl's (etcd_store)
    set(_libs "${_distcomm_pc_threads}")
  elseif(_comp STREQUAL "mpi")
    _distcomm_pc_mpi(_public_requires _cflags _public_libs)  # <mpi.h> is in its header
  elseif(_comp STREQUAL "gloo")
    _distcomm_pc_gloo(_libs)
  elseif(_comp STREQUAL "ucx")
    set(_requires ucx)
  elseif(_comp MATCHES "^(plugin|init|DistComm)$")
    # The components the target links, each through its own module (public: they are PUBLIC
    # in CMake, their headers included by the target's); the loader needs libdl.
    _distcomm_pc_linked_modules(_public_requires ${_target} ${_module})
    if(_comp STREQUAL "plugin")
      foreach(_lib IN LISTS CMAKE_DL_LIBS)
        string(APPEND _libs " -l${_lib}")
      endforeach()
    endif()
  elseif(_comp STREQUAL "cuda" OR _comp STREQUAL "nccl")
    # <cuda_runtime_api.h> (and nccl's <nccl.h>) are in its headers; CUDA's pkg-config modules
    # are named after the toolkit version (cudart-13.0), so the directories are given directly
    # (from the cache: find_package results are local to the component's directory).
    get_filename_component(_cuda_lib_dir "${CUDA_cudart_LIBRARY}" DIRECTORY)
    get_filename_component(_cuda_include_dir "${_cuda_lib_dir}/../include" ABSOLUTE)
    set(_dirs "${_cuda_include_dir}")
    set(_lib_dirs "${_cuda_lib_dir}")
    set(_public_libs "-lcudart")
    if(_comp STREQUAL "nccl")
      get_filename_component(_nccl_lib_dir "${NCCL_LIBRARY}" DIRECTORY)
      list(APPEND _dirs "${NCCL_INCLUDE_DIR}")
      list(APPEND _lib_dirs "${_nccl_lib_dir}")
      set(_public_libs "-lnccl -lcudart")
    endif()
    list(REMOVE_DUPLICATES _dirs)
    list(TRANSFORM _dirs PREPEND "-I")
    list(JOIN _dirs " " _cflags)
    list(REMOVE_DUPLICATES _lib_dirs)
    list(TRANSFORM _lib_dirs PREPEND "-L")
    list(JOIN _lib_dirs " " _lib_dirs)
    set(_public_libs "${_lib_dirs} ${_public_libs}")
  endif()

  get_target_property(_type ${_target} TYPE)
  if(NOT _type STREQUAL "SHARED_LIBRARY")  # static, or header-only (INTERFACE)
    set(DISTCOMM_PC_REQUIRES ${_public_requires} ${_requires})
    set(DISTCOMM_PC_REQUIRES_PRIVATE "")
    set(DISTCOMM_PC_LIBS "${_public_libs} ${_libs}")
    set(DISTCOMM_PC_LIBS_PRIVATE "")
  else()
    set(DISTCOMM_PC_REQUIRES ${_public_requires})
    set(DISTCOMM_PC_REQUIRES_PRIVATE ${_requires})
    set(DISTCOMM_PC_LIBS "${_public_libs}")
    set(DISTCOMM_PC_LIBS_PRIVATE "${_libs}")
  endif()
  list(JOIN DISTCOMM_PC_REQUIRES ", " DISTCOMM_PC_REQUIRES)
  list(JOIN DISTCOMM_PC_REQUIRES_PRIVATE ", " DISTCOMM_PC_REQUIRES_PRIVATE)
  set(DISTCOMM_PC_CFLAGS "${_cflags}")
  foreach(_field IN ITEMS LIBS LIBS_PRIVATE CFLAGS)
    string(STRIP "${DISTCOMM_PC_${_field}}" DISTCOMM_PC_${_field})
  endforeach()
  # Fields left empty would end in ", " or a blank: trim them.
  file(READ "${_template}" _content)
  string(CONFIGURE "${_content}" _content @ONLY)
  string(REGEX REPLACE "[, \t]+\n" "\n" _content "${_content}")
  file(CONFIGURE OUTPUT "${_distcomm_pc_stage}/${_module}.pc.in" CONTENT "${_content}" @ONLY)
  set_property(DIRECTORY "${PROJECT_SOURCE_DIR}" APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
               "${_template}")
  list(APPEND _distcomm_pc_modules ${_module})
endforeach()

# The second pass, at install time: CMAKE_INSTALL_PREFIX is then the prefix being installed to,
# and file(INSTALL) adds DESTDIR itself.
install(CODE "set(_distcomm_pc_stage \"${_distcomm_pc_stage}\")
set(_distcomm_pc_modules \"${_distcomm_pc_modules}\")
set(_distcomm_pc_dir \"${DISTCOMM_INSTALL_PKGCONFIGDIR}\")"
        COMPONENT DistComm_Development)
install(CODE [[
if(NOT IS_ABSOLUTE "${_distcomm_pc_dir}")
  set(_distcomm_pc_dir "${CMAKE_INSTALL_PREFIX}/${_distcomm_pc_dir}")
endif()
set(DISTCOMM_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
# One folder per destination, so installs of one build tree into two prefixes at once cannot
# hand each other their files.
string(MD5 _distcomm_pc_key "$ENV{DESTDIR}${_distcomm_pc_dir}")
foreach(_distcomm_pc_module IN LISTS _distcomm_pc_modules)
  set(_distcomm_pc_out "${_distcomm_pc_stage}/install-${_distcomm_pc_key}/${_distcomm_pc_module}.pc")
  configure_file("${_distcomm_pc_stage}/${_distcomm_pc_module}.pc.in" "${_distcomm_pc_out}" @ONLY)
  file(INSTALL "${_distcomm_pc_out}" DESTINATION "${_distcomm_pc_dir}")
endforeach()
file(REMOVE_RECURSE "${_distcomm_pc_stage}/install-${_distcomm_pc_key}")
]] COMPONENT DistComm_Development)

list(JOIN DISTCOMM_BUILT_COMPONENTS ", " _distcomm_built_text)
message(STATUS "DistComm: components built and installed: ${_distcomm_built_text}")
unset(_distcomm_built_text)
unset(_distcomm_compat)
unset(_distcomm_install_targets)
unset(_distcomm_pc_modules)
unset(_distcomm_pc_stage)
unset(_distcomm_pc_threads)
