(function(){
  var pick=document.getElementById('step-pick');
  function show(step){
    document.querySelectorAll('section.timeline').forEach(function(s){
      s.classList.toggle('shown', s.getAttribute('data-step')===String(step));});
    document.querySelectorAll('#stage-table tbody tr').forEach(function(r){
      r.classList.toggle('selected', r.getAttribute('data-step')===String(step));});
    if(pick) pick.value=String(step);
  }
  if(pick){pick.addEventListener('change',function(){show(pick.value);});}
  document.querySelectorAll('#stage-table tbody tr').forEach(function(r){
    r.addEventListener('click',function(){
      var s=r.getAttribute('data-step');
      if(document.querySelector('section.timeline[data-step="'+s+'"]')){show(s);
        document.getElementById('timeline').scrollIntoView();}
    });
  });
  if(pick) show(pick.value);
  var data=JSON.parse(document.getElementById('gauge-data').textContent);
  var sel=document.getElementById('metric-pick'), box=document.getElementById('metric-chart');
  if(!sel) return;
  var NS='http://www.w3.org/2000/svg';
  function el(n,a,t){var e=document.createElementNS(NS,n);for(var k in a)e.setAttribute(k,a[k]);
    if(t!==undefined)e.textContent=t;return e;}
  function draw(name){
    var d=Object.prototype.hasOwnProperty.call(data,name)?data[name]:{}, steps=Object.keys(d).filter(function(s){return typeof d[s]==='number';})
      .map(Number).sort(function(a,b){return a-b;});
    box.innerHTML='';if(!steps.length)return;
    var W=1100,H=270,L=70,T=24,B=34,pw=W-L-14,ph=H-T-B;
    var vals=steps.map(function(s){return d[s];});  // reduce: apply() takes a bounded number of arguments
    var lo=vals.reduce(function(a,b){return Math.min(a,b);}),hi=vals.reduce(function(a,b){return Math.max(a,b);});
    if(hi===lo){var p=Math.abs(hi)*0.1||1;lo=Math.max(lo-p,-Number.MAX_VALUE);hi=Math.min(hi+p,Number.MAX_VALUE);}
    var s0=steps[0],s1=steps[steps.length-1];
    // halves: hi-lo overflows to Infinity for values near the largest doubles
    function f(v,a,b){return (v/2-a/2)/(b/2-a/2);}
    function x(s){return L+(s1===s0?0.5:f(s,s0,s1))*pw;} function y(v){return T+ph-f(v,lo,hi)*ph;}
    var svg=el('svg',{viewBox:'0 0 '+W+' '+H,width:W,height:H,'class':'chart picked','data-metric':name});
    [lo,(lo+hi)/2,hi].forEach(function(v){svg.appendChild(el('line',{'class':'grid',x1:L,x2:W-14,y1:y(v),y2:y(v)}));
      svg.appendChild(el('text',{'class':'tick',x:L-6,y:y(v)+4,'text-anchor':'end'},Number(v.toPrecision(4))));});
    svg.appendChild(el('polyline',{points:steps.map(function(s){return x(s)+','+y(d[s]);}).join(' '),
      fill:'none',stroke:'#4e79a7','stroke-width':2}));
    steps.forEach(function(s){var c=el('circle',{cx:x(s),cy:y(d[s]),r:3,fill:'#4e79a7','data-step':s,
      'data-value':d[s]});c.appendChild(el('title',{},'step '+s+': '+d[s]));svg.appendChild(c);
      svg.appendChild(el('text',{'class':'tick',x:x(s),y:T+ph+14,'text-anchor':'middle'},s));});
    svg.appendChild(el('text',{'class':'axis x-label',x:L+pw/2,y:H-4,'text-anchor':'middle'},'step'));
    svg.appendChild(el('text',{'class':'axis y-label',x:L,y:14,'text-anchor':'start'},name));
    box.appendChild(svg);
  }
  sel.addEventListener('change',function(){draw(sel.value);});
  draw(sel.value);
})();
