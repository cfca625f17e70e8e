/* plot.h - lazyeval's PNG plots, drawn by gnuplot (Debian gnuplot-nox):
 *   ttft.png      the TTFT distribution of each run (cumulative, after the warm-up)
 *   quality.png   EM and F1 per question type, one bar per mode
 *   hit_rate.png  each cache tier's hit rate against its budget, one line per mode
 *                 (only when the runs tried several budgets)
 * The data (*.dat) and the script (plots.gp) are written beside them, so a
 * plot can be redrawn or restyled by hand (cd DIR && gnuplot plots.gp).
 * What it leaves out: the numbers themselves (eval/summary.h). */
#ifndef LZ_EVAL_PLOT_H
#define LZ_EVAL_PLOT_H

#include <stddef.h>

#include "eval/report.h"

/* The path of program name on PATH (or name itself when it holds a '/' and is executable) into
 * buf: 1 when found, 0 when not. */
int lz_eval_find_program(const char *name, char *buf, size_t n);

/* Writes the data and plots.gp of runs[0..n) into dir, then runs gnuplot
 * (the program path; NULL: none, the script is only written). The PNG
 * names made go into made ("ttft.png quality.png ..."). 0, or -1 with err
 * (a file that cannot be written, gnuplot failing: its messages are in
 * dir/gnuplot.log). */
int lz_eval_plot(const lz_eval_report_run *runs, int n, const char *dir, const char *gnuplot, char *made,
                 size_t madelen, char *err, size_t errlen);

#endif /* LZ_EVAL_PLOT_H */
