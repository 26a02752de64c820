"""The console's style sheet and its one script, inlined into every page: nothing is fetched from
anywhere else, so the console works on a machine with no internet."""

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:8px 16px;display:flex;gap:16px;align-items:baseline}
header a{color:#fff;text-decoration:none}header .home{font-weight:700}
main{padding:8px 16px}section{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:8px 16px;margin:12px 0}
h2{font-size:18px;margin:6px 0}h3{font-size:15px;margin:10px 0 4px}
table{border-collapse:collapse;margin:4px 0}th,td{padding:3px 8px;border-bottom:1px solid #eceff3;text-align:left}
th{font-weight:600;font-size:12px;color:#555}.muted{color:#8a93a3}.small{font-size:12px}
.stats{display:flex;gap:12px;flex-wrap:wrap;margin:6px 0}.stat{border:1px solid #dde1e7;border-radius:6px;padding:6px 12px;min-width:90px}
.stat .num{font-size:22px;font-weight:700}.stat.bad{border-color:#d0453a;background:#fdeceb}.stat.ok .num{color:#2a7a3b}
.partition{border-top:1px solid #eceff3;padding:6px 0}
svg.offset-line{width:100%;height:auto;max-width:1400px;background:#fbfbfc}
.seg{stroke:#fff;stroke-width:.5}.seg.remote.finished{fill:#3d6fc4}.seg.remote.copying{fill:#e2a33a}
.seg.remote.deleting,.seg.remote.deleted{fill:#b5b9c1}.seg.local{fill:#3c9a52}.seg.local.tiered{fill:#9fd3ab;stroke:#3d6fc4;stroke-width:1.5}
.seg.local.active{fill:#c9e86b}.row-label{font-size:10px;fill:#8a93a3}
.mark{stroke:#1d2330;stroke-width:1.5}.mark.hw{stroke:#d0453a}.mark.lso{stroke:#8e44ad;stroke-dasharray:3 2}
.mark-label{font-size:10px;fill:#1d2330}.mark-label.hw{fill:#d0453a}.mark-label.lso{fill:#8e44ad}
.legend .key{display:inline-block;width:14px;height:10px;margin:0 3px 0 10px;vertical-align:middle}
.key.finished{background:#3d6fc4}.key.copying{background:#e2a33a}.key.deleting{background:#b5b9c1}
.key.local{background:#3c9a52}.key.tiered{background:#9fd3ab;outline:1.5px solid #3d6fc4}.key.active{background:#c9e86b}
tr.remote td{background:#eef3fc}
.charts{display:flex;flex-wrap:wrap;gap:12px}.chart{border:1px solid #dde1e7;border-radius:6px;padding:4px 8px}
.chart svg{display:block;background:#fbfbfc}.chart .line{fill:none;stroke:#3d6fc4;stroke-width:1.5}
"""

# Refresh the page's main part in place every 5 s (a checkbox turns it off), keeping the scroll position.
SCRIPT = """
(function(){
  var box=document.getElementById('auto-refresh');
  if(localStorage.getItem('console-refresh')==='off'){box.checked=false;}
  box.addEventListener('change',function(){localStorage.setItem('console-refresh',box.checked?'on':'off');});
  setInterval(function(){
    if(!box.checked){return;}
    fetch(location.href,{cache:'no-store'}).then(function(r){return r.text();}).then(function(text){
      var doc=new DOMParser().parseFromString(text,'text/html');
      var main=doc.getElementById('main'),taken=doc.querySelector('[data-field=taken]');
      if(main){document.getElementById('main').innerHTML=main.innerHTML;}
      if(taken){document.querySelector('[data-field=taken]').textContent=taken.textContent;}
    }).catch(function(){});
  },5000);
})();
"""
