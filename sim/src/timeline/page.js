(function () {
  var scroller = document.getElementById('chart-scroll');
  var failure = document.getElementById('failure');
  if (scroller && failure) {
    var x = Number(failure.getAttribute('data-x'));
    scroller.scrollLeft = Math.max(0, x - scroller.clientWidth * 0.6);
  }
})();
