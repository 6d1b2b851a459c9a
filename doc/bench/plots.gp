if (!exists('parts')) parts = 'baselines algorithms accuracy'

if (strstrt(parts, 'algorithms') > 0) {
  reset
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
  plot 'algorithms.dat' using 2:xtic(1) title 'gcra', '' using 3 title 'fixed', \
       '' using 4 title 'sliding', '' using 5 title 'log', '' using 6 title 'approx'
}

if (strstrt(parts, 'baselines') > 0) {
  reset
  set terminal pngcairo size 1100,520 noenhanced font ',10'
  set style data histograms
  set style histogram clustered gap 1
  set style fill solid 0.8
  set ylabel 'ns per decision (lower is better)'
  set xtics rotate by -30
  set grid ytics
  set key outside right
  set logscale y
  set output 'baselines.png'
  set title 'GCRA: sluice vs baselines, same keys and threads'
  plot 'baselines.dat' using 2:xtic(1) title 'sluice', '' using 3 title 'sluice+clock', \
       '' using 4 title 'global mutex', '' using 5 title '256 striped mutexes', \
       '' using 6 title 'CAS floor'
}

if (strstrt(parts, 'accuracy') > 0) {
  reset
  set terminal pngcairo size 1100,900 noenhanced font ',10'
  set output 'accuracy.png'
  set datafile separator ','
  algos = 'gcra fixed sliding log approx'
  colors = '#1f77b4 #d62728 #2ca02c #9467bd #e08000'
  pat(a) = ($1 == 1 && strcol(2) eq a)
  set multiplot layout 5,1 margins 0.08,0.86,0.07,0.89 spacing 0,0.015 \
      title "Bursts of 100 units just before and 100 just after every 2nd second, " . \
            "limit 100 per second\n" . \
            "units admitted in the trailing 1 s (colour; at most 100 where the limit " . \
            "holds over any 1 s), units offered (grey), the limit (dashed)"
  set xrange [1.5:7.5]
  set yrange [0:230]
  set ytics 0,50,200
  set grid xtics ytics
  unset key
  do for [i = 1:5] {
    a = word(algos, i)
    c = word(colors, i)
    stats 'accuracy.csv' using (pat(a) ? $4 : NaN) nooutput
    set ylabel a tc rgb c
    set label 1 sprintf("peak %d\nin 1 s", int(STATS_max)) \
        at graph 1.02, graph 0.6 left tc rgb c
    if (i == 5) { set xlabel 'seconds'; set format x '%g' } else { unset xlabel; set format x '' }
    plot 'accuracy.csv' using (pat(a) ? $3 : NaN):5 with steps lw 1 lc rgb 'grey60', \
         '' using (pat(a) ? $3 : NaN):4 with steps lw 2 lc rgb c, \
         100 with lines dt 2 lw 1 lc rgb 'black'
  }
  unset multiplot
}
