set terminal pngcairo size 1100,520 noenhanced font ',10'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8
set ylabel 'ns per decision (lower is better)'
set xtics rotate by -30
set grid ytics
set key outside right
set output 'algorithms.png'
set title 'sluice: ns per decision by algorithm'
plot 'algorithms.dat' using 2:xtic(1) title 'gcra', '' using 3 title 'fixed', '' using 4 title 'sliding', '' using 5 title 'log', '' using 6 title 'approx'
set output 'baselines.png'
set title 'GCRA: sluice vs baselines, same keys and threads'
set logscale y
plot 'baselines.dat' using 2:xtic(1) title 'sluice', '' using 3 title 'sluice+clock', '' using 4 title 'global mutex', '' using 5 title '256 striped mutexes', '' using 6 title 'CAS floor'
unset logscale y
set style data lines
set xtics norotate
set output 'accuracy.png'
set datafile separator ','
set title 'Bursts of 100 just before and 100 just after every 2nd second, limit 100/s'
set xlabel 'seconds'
set ylabel 'units admitted in the trailing 1 s'
set xrange [1.5:7.5]
set yrange [0:220]
plot for [a in 'fixed gcra approx sliding log'] 'accuracy.csv' using (($1==1 && strcol(2) eq a) ? $3 : NaN):4 with steps lw 2 title a, 100 with lines dt 2 lc rgb 'black' title 'limit'
