#!/usr/bin/env python3
"""Renders a terminal capture with ANSI colours (`tmux capture-pane -p -e`)
as an SVG image, cell by cell, so the README can show a real clchat session.

    tmux capture-pane -p -e -t SESSION > screen.ans
    python3 assets/ansi_to_svg.py screen.ans COLS ROWS > assets/chat-screen.svg

Only what tmux emits is handled: SGR (bold, dim, underline, reverse, the 16
colours, 256 colours and RGB). Wide characters (CJK, emoji) take two cells.
"""
import html
import re
import sys
import unicodedata

CELL_W, CELL_H, FONT = 8.4, 17, 14
FG, BG = "#d0d0d0", "#1c1c1c"
PALETTE = ["#1c1c1c", "#e05561", "#8cc265", "#d18f52", "#4aa5f0", "#c162de", "#42b3c2", "#d0d0d0",
           "#4f5666", "#ff616e", "#a5e075", "#f0a45d", "#4dc4ff", "#de73ff", "#4cd1e0", "#e6e6e6"]
SGR = re.compile(r"\x1b\[([0-9;]*)m")


def color256(n):
    if n < 16:
        return PALETTE[n]
    if n < 232:
        n -= 16
        steps = [0, 95, 135, 175, 215, 255]
        return "#%02x%02x%02x" % (steps[n // 36], steps[(n // 6) % 6], steps[n % 6])
    v = 8 + (n - 232) * 10
    return "#%02x%02x%02x" % (v, v, v)


class Style:
    def __init__(self):
        self.reset()

    def reset(self):
        self.fg = self.bg = None
        self.bold = self.dim = self.under = self.rev = False

    def key(self):
        return (self.fg, self.bg, self.bold, self.dim, self.under, self.rev)

    def apply(self, params):
        codes = [int(p) if p else 0 for p in params.split(";")] if params else [0]
        i = 0
        while i < len(codes):
            c = codes[i]
            if c == 0:
                self.reset()
            elif c == 1:
                self.bold = True
            elif c == 2:
                self.dim = True
            elif c == 4:
                self.under = True
            elif c == 7:
                self.rev = True
            elif c == 22:
                self.bold = self.dim = False
            elif c == 24:
                self.under = False
            elif c == 27:
                self.rev = False
            elif 30 <= c <= 37:
                self.fg = PALETTE[c - 30]
            elif 90 <= c <= 97:
                self.fg = PALETTE[c - 90 + 8]
            elif 40 <= c <= 47:
                self.bg = PALETTE[c - 40]
            elif 100 <= c <= 107:
                self.bg = PALETTE[c - 100 + 8]
            elif c == 39:
                self.fg = None
            elif c == 49:
                self.bg = None
            elif c in (38, 48) and i + 1 < len(codes):
                if codes[i + 1] == 5 and i + 2 < len(codes):
                    col = color256(codes[i + 2])
                    i += 2
                elif codes[i + 1] == 2 and i + 4 < len(codes):
                    col = "#%02x%02x%02x" % tuple(codes[i + 2:i + 5])
                    i += 4
                else:
                    col = None
                if c == 38:
                    self.fg = col
                else:
                    self.bg = col
            i += 1


def width(ch):
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def cells(lines, cols):
    """Yields (row, col, text, n_cells, style key) runs."""
    style = Style()
    for row, line in enumerate(lines):
        col, run, run_col, run_key = 0, "", 0, None
        pos = 0
        while pos <= len(line):
            m = SGR.match(line, pos) if pos < len(line) else None
            if pos == len(line) or m:
                if run:
                    yield row, run_col, run, col - run_col, run_key
                    run = ""
                if m:
                    style.apply(m.group(1))
                    pos = m.end()
                    continue
                break
            ch = line[pos]
            pos += 1
            if ch == "\x1b":
                continue
            if not run:
                run_col, run_key = col, style.key()
            run += ch
            col += width(ch)
            if col >= cols:
                pos = len(line)  # the rest is off screen; flush the run above


def main():
    text = open(sys.argv[1], encoding="utf-8").read()
    cols, rows = int(sys.argv[2]), int(sys.argv[3])
    lines = text.split("\n")[:rows]
    w, h = cols * CELL_W, rows * CELL_H
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0f}" height="{h + 16:.0f}" '
           f'viewBox="-8 -8 {w + 16:.0f} {h + 16:.0f}" font-family="DejaVu Sans Mono, Menlo, '
           f'Consolas, monospace" font-size="{FONT}">',
           f'<rect x="-8" y="-8" width="{w + 16:.0f}" height="{h + 16:.0f}" rx="6" fill="{BG}"/>']
    for row, col, run, n, (fg, bg, bold, dim, under, rev) in cells(lines, cols):
        fg, bg = fg or FG, bg
        if rev:
            fg, bg = (bg or BG), fg
        x, y = col * CELL_W, row * CELL_H
        if bg:
            out.append(f'<rect x="{x:.1f}" y="{y}" width="{n * CELL_W:.1f}" height="{CELL_H}" '
                       f'fill="{bg}"/>')
        if not run.strip():
            continue
        attrs = f'fill="{fg}"'
        if bold:
            attrs += ' font-weight="bold"'
        if dim:
            attrs += ' opacity="0.6"'
        if under:
            attrs += ' text-decoration="underline"'
        out.append(f'<text x="{x:.1f}" y="{y + CELL_H - 4}" textLength="{n * CELL_W:.1f}" '
                   f'lengthAdjust="spacingAndGlyphs" xml:space="preserve" {attrs}>'
                   f'{html.escape(run)}</text>')
    out.append("</svg>")
    print("\n".join(out))


if __name__ == "__main__":
    main()
