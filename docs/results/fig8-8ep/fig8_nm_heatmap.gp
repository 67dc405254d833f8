# fig8_nm_heatmap: final test accuracy over n:m (the paper's Figure 8)
# Draw again with `gnuplot fig8_nm_heatmap.gp` in this folder (data: fig8_nm_heatmap.dat).
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 900,600 noenhanced font "DejaVu Sans,11"
} else {
    set terminal png size 900,600 noenhanced
}
set output "fig8_nm_heatmap.png"
set grid lt 1 lw 1 lc rgb "#c8c8c8"
set border lw 1.2
set title "Final test accuracy (%, mean over seeds) for n of every m gradients kept"
unset grid
set xlabel "group size m"
set ylabel "sparsity ratio m/n"
set cblabel "final test accuracy (%)"
set cbrange [92.425:93.265]
set palette defined (0 "#f7fbff", 0.5 "#6baed6", 1 "#08306b")
set xrange [-0.5:3.5]
set yrange [-0.5:2.5]
set tics scale 0
set xtics ("4" 0, "8" 1, "16" 2, "32" 3)
set ytics ("2" 0, "4" 1, "8" 2)
plot "fig8_nm_heatmap.dat" index 0 using 1:2:(0.5):(0.5):3 with boxxyerror fs solid 1.0 noborder lc palette notitle, \
     "fig8_nm_heatmap.dat" index 1 using 1:2:(0.5):(0.5) with boxxyerror fs solid 1.0 noborder lc rgb "#d9d9d9" notitle, \
     "fig8_nm_heatmap.dat" index 1 using 1:2:("N/A") with labels font ",13" notitle, \
     "fig8_nm_heatmap.dat" index 0 using 1:2:(sprintf("%s\n%.2f%%", strcol(4), $3)):5 with labels tc rgb variable font ",13" notitle
