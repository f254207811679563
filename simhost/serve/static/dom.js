// Building DOM without HTML: every string becomes a text node, never markup.
//
// The page's Content-Security-Policy forbids inline styles, so `el` refuses a
// `style` property: looks come from classes in style.css.

/** A new element: `el("div", {class: "x", "aria-label": "y"}, "text", child, [more])`.
 *
 * Props: `class` (a string, or an array whose falsy items are skipped), `text`
 * (the textContent), `hidden` and `disabled` (booleans), anything else an
 * attribute (skipped when null, undefined or false; `true` is an empty value).
 */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "style") throw new Error("no inline styles: use a class");
    if (key === "class") {
      node.className = Array.isArray(value) ? value.filter(Boolean).join(" ") : String(value);
    } else if (key === "text") {
      node.textContent = String(value);
    } else if (key === "hidden") {
      node.hidden = Boolean(value);
    } else if (key === "disabled") {
      node.disabled = Boolean(value);
    } else {
      node.setAttribute(key, value === true ? "" : String(value));
    }
  }
  append(node, children);
  return node;
}

/** Append strings (as text), nodes and (nested) arrays of them; null and undefined are skipped. */
export function append(parent, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(parent, child);
    else if (child instanceof Node) parent.appendChild(child);
    else parent.appendChild(document.createTextNode(String(child)));
  }
  return parent;
}

/** Remove every child of `node`. */
export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

// Characters a person cannot see, or that reorder or hide the text around them:
// C0/C1 controls (a line break and a tab are allowed where lines are meant),
// soft hyphen, bidi marks, embeddings, overrides and isolates, zero-width
// characters, word joiners, Hangul fillers, the BOM, interlinear annotations.
const HIDDEN =
  /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufeff\ufff9-\ufffb]/u;
const HIDDEN_ALL = new RegExp(HIDDEN.source, "gu");

/** True if `text` holds a character `visible` would show escaped. */
export function hasHidden(text, multiline = false) {
  if (typeof text !== "string") return false;
  const probe = multiline ? text.replace(/\r\n/g, "\n") : text;
  return multiline ? HIDDEN.test(probe) : HIDDEN.test(probe) || /[\n\t]/.test(probe);
}

function escapeOf(char) {
  const code = char.codePointAt(0);
  if (char === "\n") return "\\n";
  if (char === "\t") return "\\t";
  if (char === "\r") return "\\r";
  if (code === 0x1b) return "\\x1b";
  if (code < 0x100) return "\\x" + code.toString(16).padStart(2, "0");
  return "\\u" + code.toString(16).padStart(4, "0");
}

/** `text` as nodes: hidden characters (and, unless `multiline`, line breaks and
 * tabs) shown as escapes (`\u202e`) in a `span.esc`, the rest as plain text. */
export function visible(text, multiline = false) {
  const out = [];
  const source = String(text ?? "");
  const pattern = multiline ? HIDDEN_ALL : new RegExp("[\\n\\t]|" + HIDDEN.source, "gu");
  pattern.lastIndex = 0;
  let last = 0;
  let match;
  while ((match = pattern.exec(source)) !== null) {
    if (multiline && match[0] === "\r" && source[match.index + 1] === "\n") continue;
    if (match.index > last) out.push(source.slice(last, match.index));
    out.push(el("span", { class: "esc", title: "an invisible or control character" }, escapeOf(match[0])));
    last = match.index + match[0].length;
  }
  if (last < source.length) out.push(source.slice(last));
  return out;
}

/** The lines of `text`: split at `\n` (a `\r\n` counts as one break); a final
 * break ends the last line; the empty text has no lines. */
export function splitLines(text) {
  if (!text) return [];
  const lines = text.split("\n");
  if (lines.length > 1 && lines[lines.length - 1] === "") lines.pop();
  if (text.includes("\r\n")) {
    return lines.map((line) => (line.endsWith("\r") ? line.slice(0, -1) : line));
  }
  return lines;
}

/** JSON, indented, or a placeholder for what JSON cannot show. */
export function prettyJson(value) {
  try {
    const text = JSON.stringify(value, null, 2);
    return text === undefined ? String(value) : text;
  } catch {
    return String(value);
  }
}
