/** A WebSocket member of a room for the tests of `npm run room` (src/cli/room_server.ts). */

// deno-lint-ignore no-explicit-any
export type Msg = Record<string, any>;

/** One connection: its messages collected as they come, each taken once by {@link RoomClient.take}. */
export class RoomClient {
  readonly inbox: Msg[] = [];
  /** Resolves with the close code when the socket closes. */
  readonly closed: Promise<number>;
  private seq = 0;
  private wake: (() => void)[] = [];

  private constructor(readonly ws: WebSocket) {
    ws.onmessage = (e) => {
      this.inbox.push(JSON.parse(e.data as string));
      for (const w of this.wake.splice(0)) w();
    };
    this.closed = new Promise((resolve) => {
      ws.addEventListener('close', (e) => {
        resolve(e.code);
        for (const w of this.wake.splice(0)) w();
      });
    });
  }

  /** Connects to `url`. @throws Error when the upgrade is refused or the socket errs first. */
  static open(url: string): Promise<RoomClient> {
    const ws = new WebSocket(url);
    return new Promise((resolve, reject) => {
      ws.onopen = () => resolve(new RoomClient(ws));
      ws.onerror = (e) => reject(new Error(`cannot connect to ${url}: ${(e as ErrorEvent).message}`));
    });
  }

  /** Sends `m` with this connection's next seq. */
  send(m: Msg): void {
    this.ws.send(JSON.stringify({ seq: this.seq++, ...m }));
  }

  /**
   * The first message so far or to come that `match` accepts, removed from the inbox.
   * @throws Error naming `what` after `timeoutMs`, or when the socket closes first.
   */
  async take(match: (m: Msg) => boolean, what: string, timeoutMs = 10_000): Promise<Msg> {
    const until = Date.now() + timeoutMs;
    for (;;) {
      const i = this.inbox.findIndex(match);
      if (i >= 0) return this.inbox.splice(i, 1)[0];
      const left = until - Date.now();
      if (left <= 0 || this.ws.readyState === WebSocket.CLOSED) {
        throw new Error(`no ${what} within ${timeoutMs} ms; inbox: ${JSON.stringify(this.inbox).slice(0, 2000)}`);
      }
      let timer: ReturnType<typeof setTimeout> | undefined;
      await new Promise<void>((r) => {
        this.wake.push(r);
        timer = setTimeout(r, left);
      });
      clearTimeout(timer);
    }
  }

  /** The next error the server sent (its message text). */
  async error(): Promise<string> {
    return (await this.take((m) => m.type === 'error', 'error message')).message;
  }

  close(): Promise<number> {
    this.ws.close();
    return this.closed;
  }
}
