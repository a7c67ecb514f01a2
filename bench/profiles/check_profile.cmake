# Checks a --profile gradient set against its model's published size:
#   cmake -DPROFILE=file -DTENSORS=n -DPARAMETERS=n -P check_profile.cmake
# Reads the file as read_profile() does (blank lines and '#' lines skipped, every other line one
# element count) and fails unless it holds exactly TENSORS tensors of PARAMETERS elements in all.
foreach(_var PROFILE TENSORS PARAMETERS)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "check_profile.cmake: -D${_var}=... is required")
  endif()
endforeach()
if(NOT EXISTS "${PROFILE}")
  message(FATAL_ERROR "${PROFILE}: no such file")
endif()

file(STRINGS "${PROFILE}" _lines)
set(_tensors 0)
set(_parameters 0)
foreach(_line IN LISTS _lines)
  string(STRIP "${_line}" _line)
  if(_line STREQUAL "" OR _line MATCHES "^#")
    continue()
  endif()
  if(NOT _line MATCHES "^[0-9]+$")
    message(FATAL_ERROR "${PROFILE}: '${_line}' is not an element count")
  endif()
  math(EXPR _tensors "${_tensors} + 1")
  math(EXPR _parameters "${_parameters} + ${_line}")
endforeach()

if(NOT _tensors EQUAL TENSORS OR NOT _parameters EQUAL PARAMETERS)
  message(FATAL_ERROR "${PROFILE}: ${_tensors} tensors, ${_parameters} parameters; expected "
                      "${TENSORS} tensors, ${PARAMETERS} parameters")
endif()
message(STATUS "${PROFILE}: ${_tensors} tensors, ${_parameters} parameters")
