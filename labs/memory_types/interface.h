// Interface of the memory_types lab. The grader force-includes this header when it compiles
// your file, so the launcher you write must match this prototype exactly.
#pragma once

// The widest mask any case uses: size your __constant__ array with it. Your file may declare
// MAX_MASK_WIDTH itself (a #define or a constant, at least 15): then this one steps aside.
#ifndef GRADER_OWN_MAX_MASK_WIDTH
constexpr int MAX_MASK_WIDTH = 15;
#endif

// 1D convolution: out[i] = sum_j mask[j] * in[i + j - mask_width / 2], terms outside [0, n) are 0.
// in and out are device pointers to n floats; mask is a HOST pointer to mask_width floats
// (mask_width is odd and at most MAX_MASK_WIDTH). Copy the mask to __constant__ memory, launch
// on the default stream and return.
extern "C" void conv1d(const float* in, float* out, int n, const float* mask, int mask_width);
