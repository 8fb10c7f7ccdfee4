// Put the browser's own String.prototype.trim back.
//
// Dash loads babel-polyfill 7 for its renderer (which needs its regeneratorRuntime). That
// polyfill's core-js 2 still counts U+180E as white space, which engines stopped doing with
// Unicode 6.3, so it takes the browser's trim for broken and replaces it with a JavaScript
// one about 100 times slower. React trims every style value it sets: the run page's epoch
// table sets thousands, about 70 ms of a click (docs/performance.md, "Dashboard open").
// Dash serves assets after its dependencies and before its renderer, so this runs between.
(function restoreNativeTrim() {
  const frame = document.createElement("iframe");
  frame.style.display = "none";
  frame.setAttribute("aria-hidden", "true");
  document.documentElement.appendChild(frame);
  const untouched = frame.contentWindow.String.prototype;
  for (const name of ["trim", "trimStart", "trimEnd", "trimLeft", "trimRight"]) {
    if (typeof untouched[name] === "function") {
      Object.defineProperty(String.prototype, name, {
        value: untouched[name],
        writable: true,
        configurable: true,
        enumerable: false,
      });
    }
  }
  frame.remove();
})();
