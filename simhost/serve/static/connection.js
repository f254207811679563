// The WebSocket to `simhost serve`, opened again after a drop with a backoff.

export const FIRST_DELAY_MS = 500;
export const MAX_DELAY_MS = 5000;
// A socket the server has not opened the view on (`opened`) by then is dropped and
// tried again: a connect or a handshake that hangs never leaves the page waiting.
export const OPEN_WAIT_MS = 15000;

/** The relay's WebSocket URL for this page: `/ws` on the page's host, with the
 * page's `?token=` (without one, the server refuses it, and the page says so). */
export function socketUrl(location) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const token = new URLSearchParams(location.search).get("token");
  const query = token ? `?token=${encodeURIComponent(token)}` : "";
  return `${scheme}//${location.host}/ws${query}`;
}

/**
 * One connection at a time to `url`, opened again after each drop (0.5 s, then
 * doubling up to 5 s; back to 0.5 s once the server has said `opened`).
 *
 * handlers: `onOpen()` (the socket is open: send `open`), `onMessage(object)`,
 * `onClose(info)` (the socket dropped: `{code, reason, delayMs}`).
 */
export class Connection {
  constructor(url, { onOpen, onMessage, onClose }) {
    this.url = url;
    this.onOpen = onOpen;
    this.onMessage = onMessage;
    this.onClose = onClose;
    this.socket = null;
    this.delay = FIRST_DELAY_MS;
    this.timer = null;
    this.openTimer = null;
    this.attempts = 0;
  }

  start() {
    clearTimeout(this.timer);
    this.timer = null;
    this.attempts += 1;
    let socket;
    try {
      socket = new WebSocket(this.url);
    } catch (error) {
      this.dropped(null, { code: 0, reason: String(error) });
      return;
    }
    this.socket = socket;
    clearTimeout(this.openTimer);
    this.openTimer = setTimeout(() => {
      if (this.socket === socket) socket.close();
    }, OPEN_WAIT_MS);
    socket.addEventListener("open", () => {
      if (this.socket === socket) this.onOpen();
    });
    socket.addEventListener("message", (event) => {
      if (this.socket !== socket || typeof event.data !== "string") return;
      let message;
      try {
        message = JSON.parse(event.data);
      } catch {
        return;
      }
      if (message && typeof message === "object" && typeof message.type === "string") {
        this.onMessage(message);
      }
    });
    socket.addEventListener("close", (event) => this.dropped(socket, event));
  }

  dropped(socket, event) {
    if (socket !== null && this.socket !== socket) return;
    this.socket = null;
    const delayMs = this.delay;
    this.delay = Math.min(this.delay * 2, MAX_DELAY_MS);
    this.timer = setTimeout(() => this.start(), delayMs);
    this.onClose({ code: event.code, reason: event.reason, delayMs });
  }

  /** The server has opened this view: the next drop retries quickly again. */
  established() {
    this.delay = FIRST_DELAY_MS;
    clearTimeout(this.openTimer);
  }

  get isOpen() {
    return this.socket !== null && this.socket.readyState === WebSocket.OPEN;
  }

  /** Send one message; false if the socket is not open (nothing was sent). */
  send(message) {
    if (!this.isOpen) return false;
    this.socket.send(JSON.stringify(message));
    return true;
  }

  /** Drop the current socket (it is opened again after the backoff). */
  drop() {
    if (this.socket) this.socket.close();
  }
}
