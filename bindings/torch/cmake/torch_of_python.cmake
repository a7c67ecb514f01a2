# distcomm_torch_of_python(PYTHON): the PyTorch that PYTHON imports, as the INTERFACE target
# distcomm_torch_cxx (ATen, c10d: its headers, libtorch, libtorch_cpu, libc10, the C++ standard and
# the libstdc++ ABI it was built with), and distcomm_torch_python (the same with libtorch_python and
# pybind11, for the extension). Sets in the caller's scope:
#   DISTCOMM_TORCH_PY_VERSION  torch's version without its local part ("2.15.0", "1.13.0a0")
#   DISTCOMM_TORCH_CXX_STD     17, or 20 from torch 2.13 (its ATen headers refuse older)
#   DISTCOMM_TORCH_ERROR       why it cannot be used, or "" when it can
#
# Everything comes from the interpreter's own torch (torch.utils.cpp_extension, which extensions
# built by PyTorch's own tools use), never from CMake's search paths: with Debian's libtorch-dev
# installed beside a torch from PyPI, find_package(Torch) on the wheel's TorchConfig.cmake finds
# Debian's libtorch.so first, and a binding of mixed torches would load and crash.
function(distcomm_torch_of_python python)
  set(DISTCOMM_TORCH_ERROR "" PARENT_SCOPE)
  set(_probe [=[
import os, torch, torch.utils.cpp_extension as ext
inc = [p for p in ext.include_paths() if os.path.isdir(p)]
pybind = os.path.join(inc[0], "pybind11")
if not os.path.isdir(pybind):  # Debian's torch has none of its own: python3-pybind11's
    import pybind11
    inc.append(pybind11.get_include())
print(torch.__version__.split("+")[0])
print("|".join(inc))
print(ext.library_paths()[0])
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
]=])
  execute_process(COMMAND "${python}" -c "${_probe}"
                  OUTPUT_VARIABLE _out ERROR_VARIABLE _err RESULT_VARIABLE _rc
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _rc EQUAL 0)
    string(REGEX REPLACE ".*\n([^\n]+)\n*$" "\\1" _last "${_err}")
    set(DISTCOMM_TORCH_ERROR "${python} cannot import torch (and pybind11): ${_last}" PARENT_SCOPE)
    return()
  endif()
  string(REPLACE "\n" ";" _out "${_out}")
  list(GET _out 0 _version)
  list(GET _out 1 _includes)
  list(GET _out 2 _libdir)
  list(GET _out 3 _abi)
  string(REPLACE "|" ";" _includes "${_includes}")
  set(DISTCOMM_TORCH_PY_VERSION "${_version}" PARENT_SCOPE)
  if(NOT _version MATCHES "^(1\\.13|2)\\.")
    set(DISTCOMM_TORCH_ERROR "the backend is written against PyTorch 1.13 and 2.x "
        "(src/torch_api.hpp); ${python} has torch ${_version}" PARENT_SCOPE)
    return()
  endif()
  set(_std 17)
  if(_version VERSION_GREATER_EQUAL 2.13)
    set(_std 20)
  endif()
  set(DISTCOMM_TORCH_CXX_STD ${_std} PARENT_SCOPE)
  foreach(_lib torch torch_cpu c10 torch_python)
    find_library(_lib_${_lib} ${_lib} PATHS "${_libdir}" NO_DEFAULT_PATH NO_CACHE)
    if(NOT _lib_${_lib})
      set(DISTCOMM_TORCH_ERROR "${_libdir} (torch's) has no lib${_lib}.so" PARENT_SCOPE)
      return()
    endif()
  endforeach()

  add_library(distcomm_torch_cxx INTERFACE)
  target_include_directories(distcomm_torch_cxx SYSTEM INTERFACE ${_includes})
  target_link_libraries(distcomm_torch_cxx INTERFACE "${_lib_torch}" "${_lib_torch_cpu}"
                        "${_lib_c10}")
  target_compile_definitions(distcomm_torch_cxx INTERFACE _GLIBCXX_USE_CXX11_ABI=${_abi})
  target_compile_features(distcomm_torch_cxx INTERFACE cxx_std_${_std})
  add_library(distcomm_torch_python INTERFACE)
  target_link_libraries(distcomm_torch_python INTERFACE distcomm_torch_cxx "${_lib_torch_python}")
endfunction()
