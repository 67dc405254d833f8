# fig8_nm_acc: final test accuracy against n:m, lines per sparsity ratio (beside Figure 8)
# Draw again with `gnuplot fig8_nm_acc.gp` in this folder (data: fig8_nm_acc.dat).
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 900,600 noenhanced font "DejaVu Sans,11"
} else {
    set terminal png size 900,600 noenhanced
}
set output "fig8_nm_acc.png"
set grid lt 1 lw 1 lc rgb "#c8c8c8"
set border lw 1.2
set title "Final test accuracy over n:m (mean over seeds, bars: +/- std)"
set key outside right top box opaque
set xlabel "group size m"
set logscale x 2
set xrange [2.66667:48]
set xtics 2
set ylabel "final test accuracy (%)"
plot "fig8_nm_acc.dat" index 0 using 1:2:3 with yerrorlines lw 2 pt 7 ps 1.2 lc rgb "#1f77b4" title "m/n = 2: 2:4, 4:8, 8:16, 16:32", \
     "fig8_nm_acc.dat" index 1 using 1:2:3 with yerrorlines lw 2 pt 5 ps 1.2 lc rgb "#ff7f0e" title "m/n = 4: 1:4, 2:8, 4:16, 8:32", \
     "fig8_nm_acc.dat" index 2 using 1:2:3 with yerrorlines lw 2 pt 9 ps 1.2 lc rgb "#2ca02c" title "m/n = 8: 1:8, 2:16, 4:32", \
     93.2150 with lines lw 2 dt 2 lc rgb "#000000" title "dense (93.22%)"
