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

// Characters a person cannot see, or that reorder or hide the text around them: the
// terminal chat's rule (simhost/chat/text.py). Every character that is not
// printable (Unicode categories Cc, Cf, Cs, Co, Cn, Zl, Zp, and Zs but the ASCII
// space) and every other default-ignorable code point (combining grapheme joiner,
// Hangul fillers, Khmer inherent vowels, Mongolian and other variation selectors,
// the braille blank). A line break and a tab are allowed where lines are meant.
const HIDDEN_SOURCE =
  "(?![\\n\\t ])[\\p{C}\\p{Zl}\\p{Zp}\\p{Zs}\\u034f\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180d\\u180f\\u2800\\u3164\\ufe00-\\ufe0f\\uffa0\\u{e0100}-\\u{e01ef}]";
const HIDDEN = new RegExp(HIDDEN_SOURCE, "u");
// How many characters of an agent's one-line string (a title, a name, a path) are
// shown: a long one must not push the rest of the card out of sight.
export const SHORT = 200;

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
  if (code > 0xffff) return "\\U" + code.toString(16).padStart(8, "0");
  return "\\u" + code.toString(16).padStart(4, "0");
}

/** The pieces of `text`: [plain, escape, plain, …] (escapes at odd indexes), at most
 * `limit` characters of it, and how many were left out. */
function pieces(text, multiline, limit) {
  const source = String(text ?? "");
  const parts = [""]; // plain text at even indexes, escapes at odd ones
  let room = limit; // characters left to show: an escape counts what it prints
  let index = 0; // UTF-16 index of the next character
  for (const char of source) {
    if (room <= 0) break;
    const crlf = multiline && char === "\r" && source[index + 1] === "\n";
    const hidden = !crlf && (HIDDEN.test(char) || (!multiline && (char === "\n" || char === "\t")));
    if (hidden) {
      const escape = escapeOf(char);
      parts.push(escape, "");
      room -= escape.length;
    } else {
      parts[parts.length - 1] += char;
      room -= 1;
    }
    index += char.length;
  }
  let more = 0;
  for (const _ of source.slice(index)) more += 1;
  return { parts, more };
}

function moreText(more) {
  return ` … ${more.toLocaleString("en")} more character${more === 1 ? "" : "s"}`;
}

/** `text` as nodes: hidden characters (and, unless `multiline`, line breaks and
 * tabs) shown as escapes (`\u202e`) in a `span.esc`, the rest as plain text; past
 * `limit` characters, a `span.more` says how many more there are. */
export function visible(text, multiline = false, limit = Infinity) {
  const { parts, more } = pieces(text, multiline, limit);
  const out = parts.map((part, index) =>
    index % 2 ? el("span", { class: "esc", title: "an invisible or control character" }, part) : part,
  );
  if (more) out.push(el("span", { class: "more" }, moreText(more)));
  return out.filter((part) => part !== "");
}

/** `visible`'s plain-string twin (for an accessible name, a notice): one line,
 * escapes written out, at most `limit` characters. */
export function escapedText(text, limit = SHORT) {
  const { parts, more } = pieces(text, false, limit);
  return parts.join("") + (more ? moreText(more) : "");
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

// Indented JSON grows with the square of its depth: past this length, compact.
const PRETTY_LIMIT = 200_000;

/** JSON, indented (compact when indenting would make it too long), or a
 * placeholder for what JSON cannot show. */
export function prettyJson(value) {
  try {
    const compact = JSON.stringify(value);
    if (compact === undefined) return String(value);
    if (compact.length > PRETTY_LIMIT / 4) return compact;
    const text = JSON.stringify(value, null, 2);
    return text.length > PRETTY_LIMIT ? compact : text;
  } catch {
    return String(value);
  }
}
