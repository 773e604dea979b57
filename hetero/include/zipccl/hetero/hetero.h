// zipccl::hetero, the pure layer in one include: layouts, groups, batches, boundary plans, schedules,
// pipeline steps, traffic figures, the CPU executor and the text forms. The NCCL layer
// (executor_nccl.h) is separate because it needs CUDA and NCCL.
#pragma once

#include "zipccl/hetero/batch.h"
#include "zipccl/hetero/errors.h"
#include "zipccl/hetero/executor_cpu.h"
#include "zipccl/hetero/groups.h"
#include "zipccl/hetero/layout.h"
#include "zipccl/hetero/parse.h"
#include "zipccl/hetero/pipeline.h"
#include "zipccl/hetero/plan.h"
#include "zipccl/hetero/rank_plan.h"
#include "zipccl/hetero/schedule.h"
#include "zipccl/hetero/traffic.h"
