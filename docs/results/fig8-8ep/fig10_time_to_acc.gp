# fig10_time_to_acc: test accuracy against cumulative wall-clock time (Figure 10)
# Draw again with `gnuplot fig10_time_to_acc.gp` in this folder (data: fig10_time_to_acc.dat).
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 900,600 noenhanced font "DejaVu Sans,11"
} else {
    set terminal png size 900,600 noenhanced
}
set output "fig10_time_to_acc.png"
set grid lt 1 lw 1 lc rgb "#c8c8c8"
set border lw 1.2
set title "Test accuracy against training wall-clock time (mean over seeds, bars: +/- std)"
set key outside right top box opaque
set xlabel "cumulative training wall-clock time (s)"
set xrange [0:*]
set ylabel "test accuracy (%)"
plot "fig10_time_to_acc.dat" index 0 using 1:2:3 with yerrorlines lw 3 pt 7 ps 1.1 dt 1 lc rgb "#000000" title "dense", \
     "fig10_time_to_acc.dat" index 1 using 1:2:3 with yerrorlines lw 2 pt 7 ps 1.1 dt 1 lc rgb "#1f77b4" title "1:4", \
     "fig10_time_to_acc.dat" index 2 using 1:2:3 with yerrorlines lw 2 pt 5 ps 1.1 dt 1 lc rgb "#ff7f0e" title "1:8", \
     "fig10_time_to_acc.dat" index 3 using 1:2:3 with yerrorlines lw 2 pt 9 ps 1.1 dt 1 lc rgb "#2ca02c" title "2:4", \
     "fig10_time_to_acc.dat" index 4 using 1:2:3 with yerrorlines lw 2 pt 11 ps 1.1 dt 1 lc rgb "#d62728" title "2:8", \
     "fig10_time_to_acc.dat" index 5 using 1:2:3 with yerrorlines lw 2 pt 13 ps 1.1 dt 1 lc rgb "#9467bd" title "2:16", \
     "fig10_time_to_acc.dat" index 6 using 1:2:3 with yerrorlines lw 2 pt 3 ps 1.1 dt 1 lc rgb "#8c564b" title "4:8", \
     "fig10_time_to_acc.dat" index 7 using 1:2:3 with yerrorlines lw 2 pt 1 ps 1.1 dt 1 lc rgb "#e377c2" title "4:16", \
     "fig10_time_to_acc.dat" index 8 using 1:2:3 with yerrorlines lw 2 pt 2 ps 1.1 dt 1 lc rgb "#7f7f7f" title "4:32", \
     "fig10_time_to_acc.dat" index 9 using 1:2:3 with yerrorlines lw 2 pt 7 ps 1.1 dt 1 lc rgb "#bcbd22" title "8:16", \
     "fig10_time_to_acc.dat" index 10 using 1:2:3 with yerrorlines lw 2 pt 5 ps 1.1 dt 1 lc rgb "#17becf" title "8:32", \
     "fig10_time_to_acc.dat" index 11 using 1:2:3 with yerrorlines lw 2 pt 9 ps 1.1 dt 1 lc rgb "#393b79" title "16:32", \
     92.9150 with lines lw 2 lc rgb "#999999" title "target 92.92%"
