# distcomm_add_backend(<name> <sources>... [FUSION <type> <header>]): the target every backend
# is built as: distcomm_<name> (alias DistComm::<name>, exported as <name>), its public headers in
# backends/<name>/include, linked to DistComm::core and (every backend but the first, local) to
# DistComm::local: a program that offers a transport offers ranks as threads too, and the
# pkg-config module distcomm-<name> requires distcomm (core and local) the same way. The caller
# adds its transport library.
# The backend's declaration (`static constexpr backend_traits traits` in
# backends/<name>/include/distcomm/backends/<name>.hpp) is read here, and make_communicator() over
# <name>_backend (every strategy's communicator, with the fusion policy FUSION names, else
# fusion::buffer; on a host backend also a hierarchical job's, cmake/hierarchical_communicator.cpp.in)
# is generated into the target from cmake/communicators.cpp.in.
# A backend with a plugin.cpp beside its CMakeLists.txt is also built as a plugin
# (distcomm_add_backend_plugin below).
function(distcomm_add_backend name)
  cmake_parse_arguments(PARSE_ARGV 1 _arg "" "" "FUSION")
  set(_header ${CMAKE_CURRENT_SOURCE_DIR}/include/distcomm/backends/${name}.hpp)
  distcomm_read_backend_traits(${name} ${_header})
  set(DISTCOMM_BACKEND_TYPE ${name}_backend)
  set(DISTCOMM_BACKEND_NAME ${name})
  if(_arg_FUSION)
    list(GET _arg_FUSION 0 DISTCOMM_BACKEND_FUSION)
    list(GET _arg_FUSION 1 _fusion_header)
    set(DISTCOMM_BACKEND_FUSION_INCLUDE "#include \"${_fusion_header}\"")
  else()
    set(DISTCOMM_BACKEND_FUSION fusion::buffer)
    set(DISTCOMM_BACKEND_FUSION_INCLUDE "")
  endif()
  # The level across hosts of a hierarchical job: a backend whose ranks are processes on several
  # hosts moving host memory gets that job's communicator too.
  distcomm_backend_across_hosts(${name} _across)
  set(DISTCOMM_BACKEND_HIERARCHICAL "")
  if(_across)
    file(READ ${PROJECT_SOURCE_DIR}/cmake/hierarchical_communicator.cpp.in
         DISTCOMM_BACKEND_HIERARCHICAL)
    string(CONFIGURE "${DISTCOMM_BACKEND_HIERARCHICAL}" DISTCOMM_BACKEND_HIERARCHICAL @ONLY)
  endif()
  set(_generated ${CMAKE_CURRENT_BINARY_DIR}/${name}_communicators.cpp)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/communicators.cpp.in ${_generated} @ONLY)
  set(_has_local FALSE)
  if(TARGET distcomm_local)
    set(_has_local TRUE)
  endif()
  add_library(distcomm_${name} ${_arg_UNPARSED_ARGUMENTS} ${_generated})
  add_library(DistComm::${name} ALIAS distcomm_${name})
  set_target_properties(distcomm_${name} PROPERTIES EXPORT_NAME ${name}
                        OUTPUT_NAME distcomm_${name})
  target_include_directories(distcomm_${name} PUBLIC
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(distcomm_${name} PUBLIC distcomm_core PRIVATE distcomm_warnings)
  if(_has_local)
    target_link_libraries(distcomm_${name} PUBLIC distcomm_local)
  endif()
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/plugin.cpp)
    distcomm_add_backend_plugin(${name} ${CMAKE_CURRENT_SOURCE_DIR}/plugin.cpp)
  endif()
endfunction()

# distcomm_read_backend_traits(<name> <header>): the build's reading of a backend's declaration,
#   static constexpr backend_traits traits =
#       backend_traits("<name>", "<summary>").moves(memory_kind::cuda).with(capability::a | ...)...;
# into the global properties DISTCOMM_BACKEND_MEMORY_<name> (host or cuda) and
# DISTCOMM_BACKEND_CAPABILITIES_<name> (processes, store, ...: include/distcomm/backend_traits.hpp).
# The C++ side reads the same declaration; test_backend_declarations checks that both agree.
function(distcomm_read_backend_traits name header)
  file(READ ${header} _text)
  string(FIND "${_text}" "backend_traits traits =" _at)
  if(_at EQUAL -1)
    message(FATAL_ERROR "backend ${name}: ${header} declares no "
                        "'static constexpr backend_traits traits = backend_traits(...)...;' "
                        "(docs/EXTENDING.md, Adding a backend)")
  endif()
  string(SUBSTRING "${_text}" ${_at} -1 _text)
  string(FIND "${_text}" ");" _end)
  string(SUBSTRING "${_text}" 0 ${_end} _decl)
  if(NOT _decl MATCHES "backend_traits\\([ \t\n]*\"([a-z0-9_]+)\"")
    message(FATAL_ERROR "backend ${name}: ${header}: its traits name no backend "
                        "(backend_traits(\"${name}\", \"summary\"))")
  endif()
  if(NOT CMAKE_MATCH_1 STREQUAL name)
    message(FATAL_ERROR "backend ${name}: ${header} declares the name '${CMAKE_MATCH_1}'; a "
                        "backend's folder, target and declared name are the same")
  endif()
  set(_memory host)
  if(_decl MATCHES "memory_kind::cuda")
    set(_memory cuda)
  endif()
  string(REGEX MATCHALL "capability::[a-z_]+" _caps "${_decl}")
  list(TRANSFORM _caps REPLACE "^capability::" "")
  set_property(GLOBAL PROPERTY DISTCOMM_BACKEND_MEMORY_${name} ${_memory})
  set_property(GLOBAL PROPERTY DISTCOMM_BACKEND_CAPABILITIES_${name} "${_caps}")
endfunction()

# distcomm_backend_across_hosts(<name> <out>): whether backend <name> can be the level across hosts
# of a hierarchical job (host memory, processes, not single-host): <out> TRUE or FALSE.
function(distcomm_backend_across_hosts name out)
  get_property(_memory GLOBAL PROPERTY DISTCOMM_BACKEND_MEMORY_${name})
  get_property(_caps GLOBAL PROPERTY DISTCOMM_BACKEND_CAPABILITIES_${name})
  if(_memory STREQUAL "host" AND "processes" IN_LIST _caps AND NOT "single_host" IN_LIST _caps)
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

# distcomm_backends_with(<out> <memory> <capability>...): of the built backends
# (DISTCOMM_BUILT_BACKENDS), those that move <memory> (host, cuda, or ANY) and have every
# <capability>, in the build list's order.
function(distcomm_backends_with out memory)
  set(_found "")
  foreach(_backend IN LISTS DISTCOMM_BUILT_BACKENDS)
    get_property(_memory GLOBAL PROPERTY DISTCOMM_BACKEND_MEMORY_${_backend})
    get_property(_caps GLOBAL PROPERTY DISTCOMM_BACKEND_CAPABILITIES_${_backend})
    if(NOT memory STREQUAL "ANY" AND NOT _memory STREQUAL memory)
      continue()
    endif()
    set(_all TRUE)
    foreach(_cap IN LISTS ARGN)
      if(NOT _cap IN_LIST _caps)
        set(_all FALSE)
      endif()
    endforeach()
    if(_all)
      list(APPEND _found ${_backend})
    endif()
  endforeach()
  set(${out} ${_found} PARENT_SCOPE)
endfunction()

# Where plugins are installed, relative to the prefix; the loader searches it (plugins/README.md).
set(DISTCOMM_INSTALL_PLUGINDIR "${CMAKE_INSTALL_LIBDIR}/distcomm/plugins"
    CACHE STRING "Where DistComm's backend plugins are installed (relative to the prefix)")
mark_as_advanced(DISTCOMM_INSTALL_PLUGINDIR)

# distcomm_add_backend_plugin(<name> <source>): libdistcomm_backend_<name>.so in build/lib,
# installed to DISTCOMM_INSTALL_PLUGINDIR: backend distcomm_<name> behind the C ABI of
# plugins/include/distcomm/distcomm_backend_v1.h. Only the ABI's entry point is exported: the copy
# of DistComm (and of static transport libraries) inside the plugin never interposes with the
# program's own.
function(distcomm_add_backend_plugin name source)
  set(_target distcomm_backend_${name})
  add_library(${_target} MODULE ${source})
  target_link_libraries(${_target} PRIVATE distcomm_${name} distcomm_plugin_abi distcomm_warnings)
  set_target_properties(${_target} PROPERTIES
    PREFIX "lib" OUTPUT_NAME distcomm_backend_${name}
    LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib
    CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
    LINK_DEPENDS ${PROJECT_SOURCE_DIR}/plugins/export.map)
  target_link_options(${_target} PRIVATE -Wl,--exclude-libs,ALL -Wl,--no-undefined
                      -Wl,--version-script=${PROJECT_SOURCE_DIR}/plugins/export.map)
  if(DISTCOMM_INSTALL)
    install(TARGETS ${_target} LIBRARY DESTINATION "${DISTCOMM_INSTALL_PLUGINDIR}"
            COMPONENT DistComm_Runtime)
  endif()
  set_property(GLOBAL APPEND PROPERTY DISTCOMM_PLUGINS ${name})
endfunction()
