// Put the browser's own trim, parseInt and parseFloat back.
//
// Dash loads babel-polyfill 7 for its renderer (which needs its regeneratorRuntime). That
// polyfill's core-js 2 still counts U+180E as white space, which engines stopped doing with
// Unicode 6.3, so it takes these built-ins for broken and replaces them with JavaScript
// ones: its trim is about 50 times slower. React trims every style value it sets (about
// 65 ms of a click on a run) and plotly.js parses colours with parseInt (about 15 ms):
// docs/performance.md, "Dashboard open".
// Dash serves assets after its dependencies and before its renderer, so this runs between.
(function restoreNativeBuiltins() {
  const frame = document.createElement("iframe");
  frame.style.display = "none";
  frame.setAttribute("aria-hidden", "true");
  document.documentElement.appendChild(frame);
  const untouched = frame.contentWindow;
  const restore = (target, source, names) => {
    for (const name of names) {
      if (typeof source[name] === "function") {
        Object.defineProperty(target, name, {
          value: source[name],
          writable: true,
          configurable: true,
          enumerable: false,
        });
      }
    }
  };
  restore(String.prototype, untouched.String.prototype, [
    "trim",
    "trimStart",
    "trimEnd",
    "trimLeft",
    "trimRight",
  ]);
  restore(window, untouched, ["parseInt", "parseFloat"]);
  restore(Number, untouched.Number, ["parseInt", "parseFloat"]);
  frame.remove();
})();
