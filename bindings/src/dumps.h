// A dump reader as the Python object kvlab.Dump; studies.cpp loads layers from it.
#pragma once
#include <memory>

#include "kvlab/dump.h"

namespace kvlab::bind {

struct PyDump {
  std::unique_ptr<DumpReader> reader;
};

}  // namespace kvlab::bind
