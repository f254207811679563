// A line diff of two texts, bounded in work: the lines common to both ends are
// cut off first, and what changed between them is compared (longest common
// subsequence) only while it is small; past that, the old lines are shown
// removed and the new ones added.

import { splitLines } from "./dom.js";

/** Cells of the comparison table past which the changed middle is not compared. */
export const COMPARE_CELLS = 4_000_000;
/** Unchanged lines shown around each change. */
export const CONTEXT = 3;

/** The diff of `oldText` (null: a new file) and `newText` as
 * `{ops: [{op: " " | "-" | "+", text}], compared: bool}`; `compared` is false
 * when the middle was too large to compare. */
export function lineDiff(oldText, newText) {
  const a = splitLines(oldText ?? "");
  const b = splitLines(newText ?? "");
  let head = 0;
  const limit = Math.min(a.length, b.length);
  while (head < limit && a[head] === b[head]) head += 1;
  let tail = 0;
  while (tail < limit - head && a[a.length - 1 - tail] === b[b.length - 1 - tail]) tail += 1;
  const ops = [];
  for (let i = 0; i < head; i += 1) ops.push({ op: " ", text: a[i] });
  const midA = a.slice(head, a.length - tail);
  const midB = b.slice(head, b.length - tail);
  let compared = true;
  if (midA.length === 0 || midB.length === 0 || (midA.length + 1) * (midB.length + 1) > COMPARE_CELLS) {
    compared = midA.length === 0 || midB.length === 0;
    for (const text of midA) ops.push({ op: "-", text });
    for (const text of midB) ops.push({ op: "+", text });
  } else {
    ops.push(...lcsOps(midA, midB));
  }
  for (let i = a.length - tail; i < a.length; i += 1) ops.push({ op: " ", text: a[i] });
  return { ops, compared };
}

function lcsOps(a, b) {
  const n = a.length;
  const m = b.length;
  const width = m + 1;
  // table[i * width + j]: the length of the LCS of a[i:] and b[j:]
  const table = new Uint32Array((n + 1) * width);
  for (let i = n - 1; i >= 0; i -= 1) {
    for (let j = m - 1; j >= 0; j -= 1) {
      table[i * width + j] =
        a[i] === b[j]
          ? table[(i + 1) * width + j + 1] + 1
          : Math.max(table[(i + 1) * width + j], table[i * width + j + 1]);
    }
  }
  const ops = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) {
      ops.push({ op: " ", text: a[i] });
      i += 1;
      j += 1;
    } else if (table[(i + 1) * width + j] >= table[i * width + j + 1]) {
      ops.push({ op: "-", text: a[i] });
      i += 1;
    } else {
      ops.push({ op: "+", text: b[j] });
      j += 1;
    }
  }
  while (i < n) ops.push({ op: "-", text: a[i++] });
  while (j < m) ops.push({ op: "+", text: b[j++] });
  return ops;
}

/** The ops to show: every change with CONTEXT unchanged lines around it; a
 * longer run of unchanged lines is one `{op: "…", count}` row. */
export function withContext(ops, context = CONTEXT) {
  const rows = [];
  let index = 0;
  while (index < ops.length) {
    if (ops[index].op !== " ") {
      rows.push(ops[index]);
      index += 1;
      continue;
    }
    let stop = index;
    while (stop < ops.length && ops[stop].op === " ") stop += 1;
    const before = index === 0 ? 0 : context; // after the previous change
    const after = stop === ops.length ? 0 : context; // before the next change
    const run = stop - index;
    if (run <= before + after + 1) {
      for (let k = index; k < stop; k += 1) rows.push(ops[k]);
    } else {
      for (let k = index; k < index + before; k += 1) rows.push(ops[k]);
      rows.push({ op: "…", count: run - before - after });
      for (let k = stop - after; k < stop; k += 1) rows.push(ops[k]);
    }
    index = stop;
  }
  return rows;
}
