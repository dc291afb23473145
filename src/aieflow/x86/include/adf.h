// aieflow x86 shim of <adf.h>: ADF kernel I/O, graph-side API (type-check only), the AIE API
// subset, and the x86 harness objects (namespace aieflow_shim).  See README.md in this folder.
#pragma once

#include "aieflow_shim/config.hpp"
#include "aie_api/aie.hpp"
#include "aie_api/aie_adf.hpp"
#include "aieflow_shim/adf_io.hpp"
#include "aieflow_shim/adf_graph.hpp"
#include "aieflow_shim/harness.hpp"
#include "aieflow_shim/freerun.hpp"
