# fig9_layers: per-layer convolution times (the paper's Figure 9)
# Draw again with `gnuplot fig9_layers.gp` in this folder (data: fig9_layers.dat).
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 900,1040 noenhanced font "DejaVu Sans,11"
} else {
    set terminal png size 900,1040 noenhanced
}
set output "fig9_layers.png"
set grid lt 1 lw 1 lc rgb "#c8c8c8"
set border lw 1.2
set style fill solid 0.9 border lc rgb "#333333"
set ylabel "time per training step (ms)"
set yrange [0:*]
set key inside top center horizontal opaque box
set offsets 0, 0, graph 0.2, 0
set grid noxtics ytics
set multiplot layout 2,1
set title "Convolution times per layer: resnet18-w1-32x32x3, SDGP magnitude 2:4, 2 threads"
set xrange [-0.6:19.6]
set xtics ("conv0" 0, "conv1" 1, "conv2" 2, "conv3" 3, "conv4" 4, "conv5" 5, "conv6" 6, "conv7" 7, "conv8" 8, "conv9" 9, "conv10" 10, "conv11" 11, "conv12" 12, "conv13" 13, "conv14" 14, "conv15" 15, "conv16" 16, "conv17" 17, "conv18" 18, "conv19" 19) rotate by -45
set xlabel "convolution layer"
plot "fig9_layers.dat" index 0 using ($1-0.3):($2/2):(0.09):($2/2) with boxxyerror lc rgb "#4c72b0" title "forward", \
     '' index 0 using ($1-0.1):($3/2):(0.09):($3/2) with boxxyerror lc rgb "#dd8452" title "backward-data, dense", \
     '' index 0 using ($1+0.1):($4/2):(0.09):($4/2) with boxxyerror lc rgb "#55a868" title "backward-data, sparse", \
     '' index 0 using ($1+0.1):($4+$5/2):(0.09):($5/2) with boxxyerror lc rgb "#b7e0b9" title "+ pruning", \
     '' index 0 using ($1+0.3):($6/2):(0.09):($6/2) with boxxyerror lc rgb "#c44e52" title "backward-weights"
set title "Convolution times per layer: resnet18-w1-32x32x3, SDGP magnitude 4:32, 2 threads"
set xrange [-0.6:19.6]
set xtics ("conv0" 0, "conv1" 1, "conv2" 2, "conv3" 3, "conv4" 4, "conv5" 5, "conv6" 6, "conv7" 7, "conv8" 8, "conv9" 9, "conv10" 10, "conv11" 11, "conv12" 12, "conv13" 13, "conv14" 14, "conv15" 15, "conv16" 16, "conv17" 17, "conv18" 18, "conv19" 19) rotate by -45
set xlabel "convolution layer"
plot "fig9_layers.dat" index 1 using ($1-0.3):($2/2):(0.09):($2/2) with boxxyerror lc rgb "#4c72b0" title "forward", \
     '' index 1 using ($1-0.1):($3/2):(0.09):($3/2) with boxxyerror lc rgb "#dd8452" title "backward-data, dense", \
     '' index 1 using ($1+0.1):($4/2):(0.09):($4/2) with boxxyerror lc rgb "#55a868" title "backward-data, sparse", \
     '' index 1 using ($1+0.1):($4+$5/2):(0.09):($5/2) with boxxyerror lc rgb "#b7e0b9" title "+ pruning", \
     '' index 1 using ($1+0.3):($6/2):(0.09):($6/2) with boxxyerror lc rgb "#c44e52" title "backward-weights"
unset multiplot
