// aieflow x86 shim of <aie_api/aie_adf.hpp>: AIE API integration with ADF kernel I/O
// (vector iterators over buffers, vector stream and cascade access).
#pragma once

#include "aie.hpp"
#include "../aieflow_shim/adf_io.hpp"

// The stream / cascade access functions are global in ADF; make them reachable as aie:: too.
namespace aie {
using ::readincr;
using ::readincr_v;
using ::writeincr;
}  // namespace aie
