// aieflow x86 shim of <aie_api/aie.hpp>: the AI Engine API subset (UG1529, namespace aie).
#pragma once

#include "../aieflow_shim/config.hpp"
#include "../aieflow_shim/bfloat16.hpp"
#include "../aieflow_shim/float16.hpp"
#include "../aieflow_shim/types.hpp"
#include "../aieflow_shim/modes.hpp"
#include "../aieflow_shim/vector.hpp"
#include "../aieflow_shim/accum.hpp"
#include "../aieflow_shim/ops.hpp"
#include "../aieflow_shim/ldst.hpp"
#include "../aieflow_shim/mmul.hpp"
#include "../aieflow_shim/lut.hpp"
