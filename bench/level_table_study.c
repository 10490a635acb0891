/* Whether an INT8 SiLU epilogue's exact level could come from a table of
 * thresholds on the linear value v (bench/cuda_notes.md, session 45): for
 * output scales s of an asymmetric SiLU output over [-0.2785, 255 s - 0.2785],
 * the level L(v) = rint(clamp(qfi_act_value(SiLU, v, s), lo, hi)) that the
 * CPU engine computes is walked in steps of 1/64 over the v where it is
 * not constant, each change bisected to its float, and the floats around
 * it checked for places where the exact form is not monotonic ("flicker":
 * a threshold alone cannot give those levels; searched until 256 floats in
 * a row agree). Prints per scale the range
 * of v, the cells of width 1/2 over it, the thresholds, the most in a cell,
 * and the flickering thresholds with their widest extent in ulps. (Session
 * 46 built such a table and timed it: it costs more than e^x,
 * bench/requant_pass_study.cu.)
 *
 *   gcc -O2 -std=c11 -Ilib -Iinclude -I$B bench/level_table_study.c $B/.libs/libqforge.so -lm \
 *       -Wl,-rpath,$B/.libs -o /tmp/level_table_study && /tmp/level_table_study
 * ($B: a configured build, for config.h and the library.) */
#include "quant_math.h"
#include "float_order.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

static float S, LO, HI;
static int level(float v) { return (int)rintf(fminf(fmaxf(qfi_act_value(QF_ACT_SILU, v, S), LO), HI)); }

int main(void)
{
    static int per_cell[1 << 16];
    const float scales[] = {0.005f, 0.01f, 0.0246f, 0.05f, 0.1f};
    for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++) {
        S = scales[si];
        const int z = -128 - (int)lrintf(-0.2785f / S);
        LO = (float)(-128 - z), HI = (float)(127 - z);
        /* below vlo |SiLU| stays under a quarter level; above vhi the level is HI */
        double vlo = -1.0, vhi = 1.0;
        while (fabs(vlo / (1 + exp(-vlo * S))) >= 0.25 || vlo * S > -2) vlo *= 1.1;
        while (vhi / (1 + exp(-vhi * S)) < HI + 1) vhi *= 1.05;
        const int cells = (int)ceil((vhi - vlo) / 0.5);
        if (cells > (int)(sizeof per_cell / sizeof per_cell[0])) return 1;
        memset(per_cell, 0, sizeof per_cell);
        int n = 0, most = 0, flicker = 0, widest = 0;
        float pv = (float)vlo;
        int pl = level(pv);
        for (double v = vlo; v < vhi; v += 1.0 / 64) {
            const float fv = (float)v;
            const int l = level(fv);
            if (l == pl) continue;
            int32_t a = ordered(pv), b = ordered(fv); /* level(a) = pl, level(b) = l */
            while (b - a > 1) {
                const int32_t m = a + (b - a) / 2;
                if (level(from_ordered(m)) == pl) a = m;
                else b = m;
            }
            /* the farthest ulp from the threshold, on either side, whose level is the other side's:
             * searched until 256 ulps in a row agree (thresholds are thousands of ulps apart) */
            int ext = 0;
            for (int j = 1; j - ext <= 256; j++)
                if (level(from_ordered(b - j)) != pl || level(from_ordered(a + j)) != l) ext = j;
            flicker += ext > 0;
            if (ext > widest) widest = ext;
            n++;
            const int cell = (int)floor((from_ordered(b) - vlo) / 0.5);
            if (++per_cell[cell] > most) most = per_cell[cell];
            pv = fv, pl = l;
        }
        printf("s %.4f (z %d, levels %g to %g): v in [%.1f, %.1f], %d cells of 1/2, %d thresholds, at most %d a cell, "
               "%d flicker (widest %d ulps)\n",
               S, z, LO, HI, vlo, vhi, cells, n, most, flicker, widest);
    }
    return 0;
}
